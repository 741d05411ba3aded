"""`gradguard explain`: from a PyTorch traceback the user already has to the places that caused it.

A runtime autograd error names one line, usually `loss.backward()`, while its cause is
elsewhere: where the graph was made, where an earlier backward freed it, where an in-place
op changed a tensor saved for backward.  The analysis knows those places.  This module reads
a pasted traceback (Python's or IPython's, with ANSI colours, log prefixes, chained
exceptions), finds the user's own files among its frames, classifies the error by the kinds
the rules predict, analyses those files and picks the finding of the rule predicting this
very error at the line that raised.  It prints nothing: the command line and the language
server render an `Explanation` (`text`, `markdown`, `to_dict`).
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradguard.api import Checked, check_file, display_path
from gradguard.config import Config, load_config
from gradguard.encoding import decode
from gradguard.findings import Finding
from gradguard.rules import ALL_RULES, Rule
from gradguard.spans import split_lines

# The wording of each error kind the rules predict (`Rule.predicts`), as torch words it
# across versions; the same markers as the corpus's execution oracle.
KIND_MARKERS = {
    "freed_graph": ("backward through the graph a second time", "after they have already been freed",
                    "buffers have already been freed", "saved intermediate results have already been freed"),
    "inplace_version": ("modified by an inplace operation",),
    "leaf_inplace": ("leaf Variable that requires grad is being used in an in-place operation",),
    "no_grad_fn": ("does not require grad and does not have a grad_fn",),
    "numpy_requires_grad": ("Can't call numpy() on Tensor that requires grad",),
    "nonscalar_backward": ("grad can be implicitly created only for scalar outputs",),
    "nonleaf_optimizer": ("can't optimize a non-leaf Tensor",),
    "requires_grad_nonleaf": ("you can only change requires_grad flags of leaf variables",),
    "inference_tensor": ("Inference tensors cannot be saved for backward",
                         "Inplace update to inference tensor outside InferenceMode"),
    "grad_unused": ("appears to not have been used in the graph",),
}
# What the two cause sites are called for each kind: (where the value came from, where it went wrong).
ROLE_LABELS = {
    "freed_graph": ("graph made", "graph freed"),
    "inplace_version": ("tensor saved", "modified in place"),
    "leaf_inplace": ("leaf", "modified in place"),
    "no_grad_fn": ("graph made", "graph cut"),
    "numpy_requires_grad": ("graph made", "converted"),
    "nonscalar_backward": ("computed", "backward"),
    "nonleaf_optimizer": ("computed", "given to the optimizer"),
    "requires_grad_nonleaf": ("computed", "flag changed"),
    "inference_tensor": ("made in inference mode", "saved or changed"),
    "grad_unused": ("input", "differentiated"),
}
# A related location whose message says this is where the graph was freed, changed or cut;
# the others (`... is computed here, with a graph`, `... saved it here`) are where it came from.
CHANGE_PHRASES = ("freed here", "modified in place here", "cut here")
NEAR = 3  # lines between the raising line and a finding still taken as the same statement

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_HEADER = re.compile(r"Traceback \(most recent call last\):\s*$")
_IPYTHON_HEADER = re.compile(r"^-*\s*[A-Za-z_][\w.]*\s+Traceback \(most recent call last\)\s*$")
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>.+?))?\s*$')
_IPYTHON_FRAME = re.compile(r"^File (?P<path>.+?):(?P<line>\d+)(?:, in (?P<function>.+?))?\s*$")
_IPYTHON_CELL = re.compile(r"^(?P<path>Cell In\[\d+\]), line (?P<line>\d+)\s*$")
_IPYTHON_SOURCE = re.compile(r"^-*>\s*\d+\s(?P<source>.*)$")
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
# An exception line outside any traceback (a pasted message alone) must look like one.
_BARE_EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))"
                             r"(?::\s?(?P<message>.*))?$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_STDLIB = re.compile(r"(^|/)(lib/python\d[\d.]*|python\d*/lib)/", re.IGNORECASE)


class NoTraceback(ValueError):
    """The text holds no Python exception; `str()` says so in one line."""


@dataclass(frozen=True)
class Frame:
    path: str  # as the traceback gives it
    line: int
    function: str = ""
    source: str = ""  # the line's text as the traceback shows it, when it does

    @property
    def cell(self) -> bool:
        """A notebook cell (IPython's `Cell In[4], line 5`): no file names it."""
        return self.path.startswith("Cell In[")

    @property
    def library(self) -> bool:
        """A frame of torch, another installed package or the standard library: not the user's code."""
        path = self.path.replace("\\", "/")
        parts = path.lower().split("/")
        return "site-packages" in parts or "dist-packages" in parts or path.startswith("<frozen ") \
            or _STDLIB.search(path) is not None


@dataclass(frozen=True)
class Raised:
    """One exception of the text: its type, message and frames (outermost first)."""

    type: str
    message: str
    frames: tuple[Frame, ...] = ()

    @property
    def kind(self) -> str | None:
        return classify(self.message)

    @property
    def summary(self) -> str:
        """`Type: first sentence of the message` (torch appends advice after it)."""
        first = self.message.strip().split("\n", 1)[0]
        end = first.find(". ")
        return f"{self.type}: {first[:end + 1] if end >= 0 else first}" if first else self.type


@dataclass(frozen=True)
class Site:
    role: str  # "origin" (graph made, tensor saved), "change" (freed, modified, cut) or "raised"
    label: str  # what the site is for this kind of error: "graph made", "graph freed", "raised"
    path: str  # absolute when found on disk, else as the traceback gives it
    line: int
    column: int | None = None  # 1-based; None for a line a traceback names
    source: str = ""  # the line's text
    note: str = ""  # what the analysis says happens there


@dataclass
class Explanation:
    error: Raised
    raised: Site | None = None  # the user's line that raised (the innermost frame of the user's code)
    finding: Finding | None = None
    finding_path: str | None = None  # the file analysed when the finding was made
    sites: list[Site] = field(default_factory=list)  # cause sites: origin first, then changes
    notes: list[str] = field(default_factory=list)  # one line each: what could not be done and why

    @property
    def kind(self) -> str | None:
        return self.error.kind

    @property
    def rule(self) -> type[Rule] | None:
        if self.finding is not None:
            return next((r for r in ALL_RULES if r.code == self.finding.code), None)
        return next((r for r in ALL_RULES if r.predicts == self.kind), None) if self.kind else None

    def to_dict(self) -> dict:
        """The JSON form: paths relative to the working directory when below it, 1-based lines."""
        rule = self.rule
        finding = self.finding
        return {
            "error": {"type": self.error.type, "message": self.error.message, "kind": self.kind},
            "raised": _site_dict(self.raised) if self.raised else None,
            "finding": None if finding is None else {
                "code": finding.code, "name": finding.name, "message": finding.message,
                "path": display_path(finding.span.path or self.finding_path or ""),
                "line": finding.span.line, "column": finding.span.column + 1},
            "sites": [_site_dict(site) for site in self.sites],
            "fixes": [{"title": fix.title, "preferred": fix.preferred, "applicability": fix.applicability}
                      for fix in (finding.fixes if finding else ())],
            "rule": rule.code if rule else None,
            "explanation": rule.section("Why is this bad?") if rule and finding is None else None,
            "notes": self.notes,
        }

    def text(self) -> str:
        """What `gradguard explain` prints."""
        kind = f" [{self.kind}]" if self.kind else ""
        out = [f"{self.error.summary}{kind}", ""]
        rows = [*self.sites, *([self.raised] if self.raised else [])]
        width = max((len(site.label) for site in rows), default=0)
        where_width = max((len(_where(site)) for site in rows), default=0)
        for site in rows:
            out.append(f"  {site.label:<{width}}  {_where(site):<{where_width}}  {site.source}".rstrip())
            if site.note:
                out.append(f"  {'':<{width}}  {site.note}")
        if rows:
            out.append("")
        out += self.notes
        rule = self.rule
        if self.finding is not None:
            out.append(f"{self.finding.code} {self.finding.name}: {self.finding.message}")
            out += _fix_lines(self.finding, "  - ", "Fixes:")
        elif rule is not None:
            out.append(f"{rule.code} {rule.name}: {rule.section('Why is this bad?')}")
        if rule is not None:
            out.append(f"More: gradguard rule {rule.code}")
        return "\n".join(out).rstrip() + "\n"

    def markdown(self) -> str:
        """The editor's form: sites as links that open the file at the line."""
        kind = f" (`{self.kind}`)" if self.kind else ""
        parts = [f"**{_escape(self.error.summary)}**{kind}"]
        rows = [*self.sites, *([self.raised] if self.raised else [])]
        if rows:
            parts.append("\n".join(
                f"- **{site.label}**: {_link(site)}" + (f" `{site.source}`" if site.source else "")
                + (f" — {site.note}" if site.note else "") for site in rows))
        parts += [_escape(note) for note in self.notes]
        rule = self.rule
        if self.finding is not None:
            parts.append(f"**{self.finding.code} {self.finding.name}**: {self.finding.message}")
            fixes = _fix_lines(self.finding, "- ", "**Fixes**")
            if fixes:
                parts.append("\n".join(fixes))
        elif rule is not None:
            parts.append(f"**{rule.code} {rule.name}**: {rule.section('Why is this bad?')}")
        if rule is not None:
            parts.append(f"[{rule.code} documentation]({rule.url()}) · `gradguard rule {rule.code}`")
        return "\n\n".join(parts) + "\n"


def classify(message: str) -> str | None:
    """The error kind a rule predicts (`freed_graph`, ...) that torch's message names, if any."""
    return next((kind for kind, markers in KIND_MARKERS.items() if any(m in message for m in markers)), None)


def parse(text: str) -> list[Raised]:
    """Every exception of the text with its frames, in the order printed.  Colour codes are
    dropped, and a prefix written before `Traceback (most recent call last):` (a log line's
    time stamp, torchrun's `[rank0]: `) is dropped from the lines that repeat it."""
    found: list[Raised] = []
    frames: list[Frame] | None = None  # inside a traceback: its frames so far
    prefix = ""
    ipython = False  # IPython's layout: its source lines are numbered, the one that ran marked `---->`
    exception: dict | None = None  # the exception being read (its message may go on over lines)
    for raw in _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw[len(prefix):] if prefix and raw.startswith(prefix) else raw
        header = _HEADER.search(line)
        if header or _IPYTHON_HEADER.match(line):
            _finish(found, exception)
            exception, frames, ipython = None, [], header is None
            prefix = line[:header.start()] if header else ""
            continue
        if exception is not None:
            if line.strip() and not line.startswith(_CHAIN) and not _frame(line):
                exception["message"] += "\n" + line
                continue
            _finish(found, exception)
            exception = None
        if frames is not None:
            frame = _frame(line)
            if frame is not None:
                frames.append(frame)
            elif frames and not frames[-1].source and _source_of(line, ipython):
                frames[-1] = Frame(frames[-1].path, frames[-1].line, frames[-1].function, _source_of(line, ipython))
            elif (match := _EXCEPTION.match(line)) is not None:
                exception = {"type": match["type"], "message": match["message"] or "", "frames": tuple(frames)}
                frames = None
        elif (match := _BARE_EXCEPTION.match(line.strip())) is not None:
            exception = {"type": match["type"], "message": match["message"] or "", "frames": ()}
    _finish(found, exception)
    return found


def pick(raised: Sequence[Raised]) -> Raised:
    """The exception to explain: the last one of a kind the rules predict (a RuntimeError that
    the user's code caught and re-raised as another stays the one to explain), else the last."""
    if not raised:
        raise NoTraceback("no Python traceback or exception line in the input")
    return next((r for r in reversed(raised) if r.kind is not None), raised[-1])


def resolve(path: str, cwd: Path, roots: Sequence[Path] = ()) -> Path | None:
    """The file a frame names: as given (relative to `cwd`), else the longest trailing part of
    the path found under one of `roots` (a traceback from another machine, or Windows)."""
    given = Path(os.path.expanduser(path))
    parts = [p for p in re.split(r"[\\/]+", path) if p and p not in (".", "..") and not p.endswith(":")]
    candidates = [given if given.is_absolute() else cwd / given,
                  *(Path(root, *parts[start:]) for start in range(len(parts)) for root in roots)]
    return next((candidate.resolve() for candidate in candidates if _is_file(candidate)), None)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: no file of this machine
        return False


def explain(text: str, *, cwd: Path | None = None, roots: Sequence[Path] = (),
            config_for: Callable[[Path], Config] | None = None) -> Explanation:
    """Explain the traceback in `text`.  Raises NoTraceback when it holds no exception.

    The user's frames (not torch's, another package's or the standard library's) are tried
    from the innermost out: the first whose file holds a finding of the rule predicting this
    error at (or within `NEAR` lines of) the frame's line gives the cause sites.  Every rule
    runs, whatever the project selects: the error has happened, the question is only why.
    """
    cwd = cwd or Path.cwd()
    config_for = config_for or (lambda path: load_config(path.parent))
    error = pick(parse(text))
    explanation = Explanation(error)
    user = [frame for frame in reversed(error.frames) if not frame.library]  # innermost first
    if not user:
        explanation.notes.append("The traceback names no file of yours (only torch's, libraries' or Python's own)."
                                 if error.frames else "There is no traceback: GradGuard cannot say where it raised.")
        return explanation
    sources = _Sources()
    located = [(frame, path, _candidates(frame, sources.lines(path)))
               for frame in user for path in [resolve(frame.path, cwd, roots)] if path is not None]
    innermost = user[0]
    if located and located[0][0] is innermost:
        explanation.raised = _raised(located[0][1], located[0][2][0], sources, innermost)
    else:
        explanation.raised = Site("raised", "raised", innermost.path, innermost.line, source=innermost.source.strip())
    if not located:
        if innermost.cell:
            explanation.notes.append(f"{innermost.path} is a notebook cell, which a traceback does not name the "
                                     "notebook of: `gradguard check NOTEBOOK.ipynb` finds the error in it.")
        else:
            hint = "" if roots else " (--root DIR looks for it under DIR)"
            explanation.notes.append(f"{innermost.path} is not on this machine{hint}: "
                                     "GradGuard cannot say why it raised.")
        return explanation
    if error.kind is None:
        explanation.notes.append("This is not one of the autograd errors GradGuard predicts "
                                 f"({', '.join(KIND_MARKERS)}).")
        return explanation
    checked: dict[Path, Checked] = {}
    for frame, path, lines in located:
        if path not in checked:
            checked[path] = _check(path, sources, config_for(path))
        match = _matching(checked[path].findings, error.kind, lines)
        if match is not None:
            line, finding = match
            if frame is innermost:  # the line it is now: the traceback's text, else the finding's statement
                same = not frame.source or _line(sources.lines(path), line) == frame.source.strip()
                explanation.raised = _raised(path, line if same else finding.span.line, sources, frame)
            explanation.finding, explanation.finding_path = finding, str(path)
            explanation.sites = _sites(finding, error.kind, str(path), sources)
            return explanation
    explanation.notes += [result.error for result in checked.values() if result.error]
    names = ", ".join(display_path(str(path)) for path in checked)
    explanation.notes.append(f"GradGuard found no cause of this error in {names}.")
    return explanation


class _Sources:
    """The files an explanation reads, each read once: bytes for the analysis, lines to show."""

    def __init__(self):
        self.data: dict[Path, bytes | None] = {}
        self.decoded: dict[Path, list[str]] = {}

    def read(self, path: Path) -> bytes | None:
        path = path.resolve()
        if path not in self.data:
            try:
                self.data[path] = path.read_bytes()
            except OSError:
                self.data[path] = None
        return self.data[path]

    def lines(self, path: Path) -> list[str]:
        path = path.resolve()
        if path not in self.decoded:
            data = self.read(path)
            try:
                text = decode(data) if data is not None else ""
                self.decoded[path] = [line.rstrip("\r\n") for line in split_lines(text)]
            except (SyntaxError, UnicodeDecodeError, LookupError):
                self.decoded[path] = []
        return self.decoded[path]


def _finish(found: list[Raised], exception: dict | None) -> None:
    if exception is not None:
        found.append(Raised(exception["type"], exception["message"].strip(), exception["frames"]))


def _frame(line: str) -> Frame | None:
    match = _FRAME.search(line) or _IPYTHON_FRAME.match(line) or _IPYTHON_CELL.match(line)
    if match is None:
        return None
    return Frame(match["path"], int(match["line"]), match.groupdict().get("function") or "")


def _source_of(line: str, ipython: bool) -> str:
    """The source a traceback shows under a frame: Python's indented line that is not only
    carets (`^^^^`, `~~~`), IPython's `---> 12 loss.backward()`."""
    if ipython:
        match = _IPYTHON_SOURCE.match(line)
        return match["source"].strip() if match else ""
    return line.strip() if line[:1].isspace() and line.strip(" ^~\t") else ""


def _check(path: Path, sources: _Sources, config: Config) -> Checked:
    """The file checked with every rule (see `explain`)."""
    config = config.merged({"select": ["ALL"], "ignore": [], "enabled": True}, "gradguard explain")
    return check_file(path, config, sources.read(path))


def _candidates(frame: Frame, lines: list[str]) -> list[int]:
    """The lines the frame's line may be in the file as it is now, the likeliest first: the
    line number given when its text is still the traceback's own, else the lines with that
    text, nearest first (the file was edited since it ran; `explain` takes the one holding
    a finding)."""
    want = frame.source.strip()
    if not want or not lines or _line(lines, frame.line) == want:
        return [frame.line]
    same = sorted((number for number, text in enumerate(lines, 1) if text.strip() == want),
                  key=lambda number: abs(number - frame.line))
    return same or [frame.line]


def _raised(path: Path, line: int, sources: _Sources, frame: Frame) -> Site:
    return Site("raised", "raised", str(path), line, source=_line(sources.lines(path), line) or frame.source.strip())


def _line(lines: list[str], number: int) -> str:
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""


def _matching(findings: Iterable[Finding], kind: str, lines: list[int]) -> tuple[int, Finding] | None:
    """(line, finding) of a finding predicting `kind` at one of `lines` (the likeliest first):
    one whose statement holds the line, else the nearest within `NEAR` lines."""
    def distance(finding: Finding, line: int) -> int:
        span = finding.span
        return 0 if span.line <= line <= span.end_line else min(abs(span.line - line), abs(span.end_line - line))

    scored = [((distance(f, line), order, f.span.line, f.span.column), line, f)
              for f in findings if f.predicts == kind for order, line in enumerate(lines)]
    best = min(scored, key=lambda item: item[0], default=None)
    return (best[1], best[2]) if best is not None and best[0][0] <= NEAR else None


def _sites(finding: Finding, kind: str, path: str, sources: _Sources) -> list[Site]:
    """The finding's related locations, origin first; an in-place change of a leaf (which has
    none: the change is the cause) is its own site."""
    origin, change = ROLE_LABELS[kind]
    sites = []
    for rel in finding.related:
        role = "change" if any(p in rel.message for p in CHANGE_PHRASES) else "origin"
        where = rel.span.path or path
        sites.append(Site(role, change if role == "change" else origin, where, rel.span.line, rel.span.column + 1,
                          _line(sources.lines(Path(where)), rel.span.line), rel.message))
    if not sites:
        span = finding.span
        sites.append(Site("change", change, path, span.line, span.column + 1,
                          _line(sources.lines(Path(path)), span.line)))
    return sorted(sites, key=lambda site: site.role != "origin")


def _site_dict(site: Site) -> dict:
    return {"role": site.role, "label": site.label, "path": display_path(site.path), "line": site.line,
            "column": site.column, "source": site.source, "note": site.note}


def _where(site: Site) -> str:
    column = f":{site.column}" if site.column is not None else ""
    return f"{display_path(site.path)}:{site.line}{column}"


def _link(site: Site) -> str:
    label = _escape(_where(site))
    if not os.path.isabs(site.path):
        return label
    return f"[{label}]({Path(site.path).as_uri()}#L{site.line})"


def _fix_lines(finding: Finding, bullet: str, heading: str) -> list[str]:
    lines = []
    for fix in finding.fixes:
        tags = ", ".join(tag for tag, on in (("preferred", fix.preferred), ("unsafe", fix.applicability != "safe"))
                         if on)
        lines.append(f"{bullet}{fix.title}" + (f" ({tags})" if tags else ""))
    return [heading, *lines] if lines else []


def _escape(text: str) -> str:
    """Markdown's special characters in text that is not ours (a message, a path)."""
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)
