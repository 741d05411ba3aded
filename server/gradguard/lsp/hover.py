"""Hover text: what will happen at run time, in this program's own terms.

On a flagged range: the finding, why it fails (the rule's own explanation), the places
that cause it, and each fix with its trade-off.  On a `backward()` call: which graph it
runs through and what it frees.  On a tensor-valued name: whether it requires grad, which
graph it carries, and whether an earlier backward freed or an in-place op changed it.
"""
from __future__ import annotations

import ast
import os

from gradguard.engine.values import DIRTY, FREED
from gradguard.facts import Facts, position
from gradguard.findings import Finding, Span
from gradguard.ids import gid
from gradguard.notebook import Cells, line_label
from gradguard.rules import rule_by_code

TRADE_OFFS = {
    "detach": "gradients stop at that point: nothing before it is trained by this loss",
    "detach_before": "the value keeps its data but not its history: no gradient flows into earlier iterations",
    "detach_after": "the value keeps its data but not its history: no gradient flows into earlier iterations",
    "no_grad": "the value is computed without a graph: the modules that compute it get no gradient from it",
    "retain_graph": "the graph stays in memory and is backpropagated again: gradients into the shared part "
                    "add up, and a weight changed in place since (an optimizer step) still breaks it",
    "move_into_loop": "recomputed every iteration: more compute, but each backward gets a fresh graph",
    "move_after": "the parameters change only after every backward that needs them has run",
    "out_of_place": "a new tensor instead of overwriting the saved one: a little more memory",
    "clone_before": "the in-place change goes to a copy: a little more memory",
    "item": "a Python number: no graph is kept alive",
    "retain_grad": "autograd keeps this non-leaf's gradient: a little more memory",
    "zero_grad": "each step uses only this iteration's gradients",
}


def contains(span: Span, line: int, column: int) -> bool:
    """Whether the 1-based line / character column lies within the span (end inclusive)."""
    return (span.line, span.column) <= (line, column) <= (span.end_line, span.end_column)


def finding_markdown(f: Finding, cells: Cells = ()) -> str:
    """`cells`: a notebook's, so that the places it names are cells' lines."""
    rule = rule_by_code(f.code)
    parts = [f"**{f.code} {f.name}** ({f.severity})", f.message]
    why = rule.section("Why is this bad?") if rule else ""
    if why:
        parts.append(f"**What happens at run time.** {why}")
    if f.related:
        parts.append("**Where it comes from**\n"
                     + "\n".join(f"- {_where(r.span, cells)}: {r.message}" for r in f.related))
    if f.fixes:
        lines = []
        for fix in f.fixes:
            trade = "; ".join(dict.fromkeys(TRADE_OFFS[e.kind] for e in fix.edits if e.kind in TRADE_OFFS))
            mark = " *(preferred for this data flow)*" if fix.preferred else ""
            lines.append(f"- {fix.title}{mark}" + (f" — {trade}" if trade else ""))
        parts.append("**Fixes**\n" + "\n".join(lines))
    if rule:
        parts.append(f"[{f.code} documentation]({rule.url()})")
    return "\n\n".join(parts)


def note_at(facts: Facts, line: int, column: int) -> str | None:
    """Hover for an unflagged position of the file analysed: the backward call there, else the
    innermost name holding a tensor (of `a.b.c`, the one that starts last)."""
    for b in facts.backwards.values():
        if not facts.foreign(b.node) and contains(facts.span(b.node), line, column):
            return _backward_markdown(facts, b)
    best = None  # (span, node)
    for node in facts.nodes(None, ast.Name, ast.Attribute):
        if gid(node) in facts.values:
            span = facts.span(node)
            if contains(span, line, column) and (best is None or span.column >= best[0].column):
                best = span, node
    return _value_markdown(facts, best[1]) if best is not None else None


def _regions_text(facts: Facts, regions, limit: int = 3) -> str:
    nodes = {facts.regions[r].node for r in regions if r in facts.regions and facts.regions[r].saves}
    saving = sorted(nodes, key=position)  # one entry per op, whatever the iteration
    shown = ", ".join(f"`{facts.text(n, 40)}` ({facts.line(n)})" for n in saving[:limit])
    more = f" and {len(saving) - limit} more" if len(saving) > limit else ""
    return shown + more


def _backward_markdown(facts: Facts, b) -> str:
    root = facts.text(b.root) if b.root is not None else "this value"
    graph = _regions_text(facts, b.regions)
    parts = [f"**backward** of `{root}`"]
    if b.no_grad_fn:
        parts.append("It has no graph: nothing on its path requires grad.")
    elif graph:
        parts.append(f"Runs through the saved tensors of {graph}.")
    if b.retain is True:
        parts.append("Keeps the graph (`retain_graph=True`): it can be backpropagated again.")
    elif b.retain is False:
        parts.append("Frees those saved tensors: a later backward through the same ops fails unless they are "
                     "computed again.")
    return "\n\n".join(parts)


def _value_markdown(facts: Facts, node) -> str:
    t = facts.values[gid(node)]
    name = facts.text(node)
    grad = {True: "requires grad", False: "does not require grad", None: "may require grad"}[t.rg]
    kind = "a leaf" if t.leaf is True else ("the result of an operation" if t.leaf is False else "a tensor")
    parts = [f"`{name}`: tensor, {kind}, {grad}"]
    graph = _regions_text(facts, t.regions)
    if graph:
        parts.append(f"Carries the graph of {graph}.")
    for kind, possible, text in ((FREED, t.freed, "Freed by an earlier backward"),
                                 (DIRTY, t.dirty, "Saved tensors changed in place since")):
        surely = t.sure_regions(kind)
        if surely:
            parts.append(f"{text}: {_regions_text(facts, surely)}.")
        elif possible & t.regions:
            parts.append(f"{text} on some paths only: {_regions_text(facts, possible)}.")
    return "\n\n".join(parts)


def _where(span, cells: Cells) -> str:
    return line_label(cells, span.line) if span.path is None else f"line {span.line} of `{os.path.basename(span.path)}`"
