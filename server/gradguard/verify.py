"""Fixes re-checked by the engine before anyone is offered them.

A planned fix is a guess about data flow; the engine that found the error can check it.
Each candidate is applied to the text and the result analysed again: it is kept only if
the finding it fixes is gone and no other error finding appears that was not there
before (a `retain_graph=True` that turns a freed graph into a saved tensor modified by
`optimizer.step()`, a `.detach()` of the loss that leaves it without a grad_fn).  A safe
fix (an out-of-place op, `inplace=False`) computes the same values, so it cannot cause an
error: what appears after it was hidden behind the error it removed (torch stops at the
first), and it is kept.  So is a fix that only reconnects a graph someone cut (removing a
`.detach()`, a `no_grad` block or decorator, a `requires_grad_(False)`): the errors in the
graph it brings back were there to meet.  The first survivor is the preferred one.
Findings are matched by rule and by the texts of their line and of the lines they point to,
since an edit moves lines.

libcst builds the edits, so this runs where a fix is about to be used (code actions,
`gradguard check --fix`), never in a plain analysis.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from gradguard.analysis import AnalysisTimeout, analyze
from gradguard.engine.limits import Limits
from gradguard.engine.raises import RAISED_KINDS
from gradguard.findings import Finding, Fix
from gradguard.spans import LINE_BREAK

# The analysis of one edited text may do this much work (steps: about 4 s here) before the
# candidate is dropped: counted, not timed, so a fix is offered or not alike on every machine.
WORK = Limits(work=200_000)
RECONNECTING = frozenset({"remove_detach", "unwrap", "delete", "soft_argmax", "soft_compare", "to_torch", "remove_item", "stack",
                          "unwrap_item", "create_graph", "requires_grad_after"})  # edit kinds that undo a graph cut


def applied(source: str, fix: Fix) -> str | None:
    """The text with the fix applied, or None if its edits cannot be built here."""
    from gradguard import edits  # libcst loads only when a fix is checked

    reps = edits.replacements(source, fix)
    return edits.apply(source, reps) if reps else None


def verified(source: str, finding: Finding, findings: list[Finding] | None = None, *, path: str = "<string>",
             workspace=None) -> tuple[Fix, ...]:
    """The fixes of `finding` that the engine confirms, in their order, the first preferred.
    `findings`: everything found in `source` (analysed again if not given); `path` and
    `workspace`: where the file is, so its imports are followed as when it was checked."""
    if findings is None:
        findings = analyze(source, path=path, workspace=workspace)
    target = _key(source, finding)
    before = _keys(source, findings) - Counter([target])
    before_all = _keys(source, findings, every=True) - Counter([target])
    out = []
    for fix in finding.fixes:
        text = applied(source, fix)
        if text is None:
            continue
        try:
            found = analyze(text, path=path, workspace=workspace, limits=WORK)
        except (SyntaxError, AnalysisTimeout):
            continue
        after, after_all = _keys(text, found), _keys(text, found, every=True)
        new = after - before
        gone = after_all[target] <= before_all[target]  # `before` lacks this finding: as many as the others left
        uncovers = fix.applicability == "safe" or set(fix.kinds) <= RECONNECTING or (
            # errors after one the path ended at (a raising op) were hidden behind it
            finding.predicts in RAISED_KINDS and all(f.span.line > finding.span.line for f in found
                                                     if f.predicts and _key(text, f) in new))
        if set(fix.kinds) <= RECONNECTING:  # a graph reconnected, then cut again further on: not gone
            gone = gone and _lines(after_all)[target[:2]] <= _lines(before_all)[target[:2]]
        # the same statement raising the same error for the next of its operands (`SGD([{"params": a},
        # {"params": b}])` once `a` is fixed) was hidden behind this one, as torch stops at the first
        added = Counter({k: n for k, n in new.items() if k[:2] != target[:2]})
        if gone and (uncovers or not added):
            out.append(replace(fix, preferred=not out))
    return tuple(out)


def _key(source: str, finding: Finding) -> tuple:
    """A finding as the texts of its line, of what it flags there and of the lines it points
    to (an edit moves lines; two errors at one backward differ by their causes)."""
    lines = LINE_BREAK.split(source)

    def text(line: int) -> str:
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""
    span = finding.span
    flagged = lines[span.line - 1][span.column:span.end_column] if span.line == span.end_line and \
        0 < span.line <= len(lines) else ""  # two findings on one line (`[{"params": a}, {"params": b}]`)
    return finding.code, text(span.line), flagged, tuple(
        text(r.span.line) if r.span.path is None else (r.span.path, r.span.line) for r in finding.related)


def _lines(keys: Counter) -> Counter:
    """Findings counted by rule and line text only (not by the lines they point to)."""
    out: Counter = Counter()
    for key, n in keys.items():
        out[key[:2]] += n
    return out


def _keys(source: str, findings: list[Finding], every: bool = False) -> Counter:
    """The predicting findings by key (what a fix must not add), or `every` one (whether the
    fixed finding, advisory or not, is gone)."""
    return Counter(_key(source, f) for f in findings if every or f.predicts)


def fix_all(source: str, path: str, config, unsafe: bool = False, rounds: int = 20,
            workspace=None) -> tuple[str, list[str]]:
    """`source` with the preferred confirmed fix of each reported finding applied, one at a
    time (each fix moves the text the next one is planned on), and the titles applied.
    Only safe fixes unless `unsafe`; a finding whose preferred fix is not allowed is left.
    Imports are followed as `check_source` follows them (`workspace`: the server's)."""
    from gradguard.api import check_source, workspace_for  # the findings as reported: settings and noqa applied

    workspace = workspace_for(config, workspace)
    done: list[str] = []
    skipped: set = set()
    for _ in range(rounds):
        result = check_source(source, path, config, workspace=workspace)
        if result.error:
            break
        candidates = [f for f in result.findings if f.fixes and _key(source, f) not in skipped]
        # unfiltered by settings: what a fix must not add
        everything = analyze(source, path=path, workspace=workspace) if candidates else []
        for finding in candidates:
            fixes = verified(source, finding, everything, path=path, workspace=workspace)
            fix = fixes[0] if fixes else None
            if fix is None or (fix.applicability != "safe" and not unsafe):
                skipped.add(_key(source, finding))
                continue
            source = applied(source, fix)
            done.append(fix.title)
            break
        else:
            break
    return source, done
