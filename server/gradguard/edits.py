"""A `Fix` as text replacements, made with libcst on the smallest piece of source.

libcst keeps every byte it is not asked to change, but parsing a whole 2,000-line module
with it takes ~0.4 s (over 1 s with positions): too slow for a code action.  So the
stdlib `ast` (fast) finds the node an edit's span names, and libcst parses only the
smallest run of whole lines the change needs — the expression, the statement, its `;`
line, or the compound statement whose one-line body must be split — and the result is
spliced back.  An indented piece is parsed under an `if True:` header at its own
indentation rather than dedented, so string literals spanning lines keep their text.
Replacements are trimmed to the lines that really change, and the edited file must parse
(`ast`) or nothing is offered: the server shows no fix rather than a broken one.
"""
from __future__ import annotations

import ast
import warnings
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from gradguard import knowledge as K
from gradguard.findings import Edit, Fix, Span
from gradguard.spans import LINE_BREAK, split_lines

__all__ = ["Replacement", "apply", "replacements"]

_PREC = {ast.BitOr: 1, ast.BitXor: 2, ast.BitAnd: 3, ast.LShift: 4, ast.RShift: 4, ast.Add: 5, ast.Sub: 5,
         ast.Mult: 6, ast.MatMult: 6, ast.Div: 6, ast.FloorDiv: 6, ast.Mod: 6, ast.Pow: 8}
_ATOMS = (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.List, cst.ListComp, cst.Dict, cst.DictComp,
          cst.Set, cst.SetComp, cst.SimpleString, cst.FormattedString)


@dataclass(frozen=True)
class Replacement:
    span: Span  # 1-based lines, 0-based character columns, end exclusive
    text: str


def replacements(source: str, fix: Fix) -> list[Replacement]:
    """Non-overlapping replacements that make the fix, in source order; [] if the fix
    cannot be made safely (then the server offers nothing rather than a broken edit)."""
    try:
        doc = _doc(source)
        changes: list = []  # (replacement, (first, last) lines to check it parses, None: the whole file)
        wraps = [e for e in fix.edits if e.kind == "no_grad"]
        if wraps:
            changes += _no_grad(doc, wraps) or [(None, None)]
        for e in fix.edits:
            if e.kind != "no_grad":
                handler = _HANDLERS.get(e.kind)
                changes += (handler(doc, e) if handler else None) or [(None, None)]
        if not changes or any(r is None for r, _ in changes):
            return []
        reps = _merged([r for r, _ in changes])
        if not reps or not _parses(doc, source, reps, [region for _, region in changes]):
            return []
        return reps
    except Exception:  # noqa: BLE001 -- odd input (or a libcst/ast limit): offer nothing, never raise
        return []


def apply(source: str, reps: list[Replacement]) -> str:
    """The source with the replacements made."""
    starts = [0, 0]  # starts[n]: offset of line n; one past the last line is the end of the text
    for line in split_lines(source):
        starts.append(starts[-1] + len(line))

    def offset(line: int, col: int) -> int:
        return starts[line] + col if line < len(starts) else len(source)

    out = source
    for r in sorted(reps, key=lambda r: (r.span.line, r.span.column), reverse=True):
        out = out[:offset(r.span.line, r.span.column)] + r.text + out[offset(r.span.end_line, r.span.end_column):]
    return out


# ----------------------------------------------------------------- the source, as ast sees it
class _Doc:
    """A source's lines (split where the tokenizer splits them) and its `ast` tree."""

    def __init__(self, source: str):
        self.lines = split_lines(source)
        m = LINE_BREAK.search(source)
        self.newline = m.group() if m else "\n"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.tree = ast.parse(source)
        self._unit: str | None = None

    def text(self, n: int) -> str:
        return self.lines[n - 1].rstrip("\r\n") if 0 < n <= len(self.lines) else ""

    def eol(self, n: int) -> str:
        return self.lines[n - 1][len(self.text(n)):] if 0 < n <= len(self.lines) else ""

    def indent(self, n: int) -> str:
        t = self.text(n)
        return t[:len(t) - len(t.lstrip(" \t"))]

    def col(self, n: int, byte_col: int) -> int:
        t = self.text(n)
        return byte_col if t.isascii() else len(t.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def span(self, node) -> tuple:
        return (node.lineno, self.col(node.lineno, node.col_offset),
                node.end_lineno, self.col(node.end_lineno, node.end_col_offset))

    def segment(self, sp: Span) -> str:
        if sp.line == sp.end_line:
            return self.text(sp.line)[sp.column:sp.end_column]
        return "".join([self.lines[sp.line - 1][sp.column:], *self.lines[sp.line:sp.end_line - 1],
                        self.text(sp.end_line)[:sp.end_column]])

    def source(self, node) -> str:
        """The text of an `ast` node."""
        return self.segment(Span(*self.span(node)))

    @property
    def unit(self) -> str:
        """The file's indentation step, from its first indented block (4 spaces if none)."""
        if self._unit is None:
            self._unit = "    "
            todo = deque(self.tree.body)
            while todo:
                node = todo.popleft()
                body = getattr(node, "body", None)
                if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                    continue
                outer, inner = self.indent(_start(node)), self.indent(body[0].lineno)
                if body[0].lineno > node.lineno and inner.startswith(outer) and len(inner) > len(outer) \
                        and len(inner) == len(self.text(body[0].lineno)[:self.col(body[0].lineno, body[0].col_offset)]):
                    self._unit = inner[len(outer):]
                    break
                todo.extend(s for f in ("body", "orelse", "finalbody") for s in getattr(node, f, ()) or ())
        return self._unit


@lru_cache(maxsize=8)
def _doc(source: str) -> _Doc:
    return _Doc(source)  # a code action asks for every fix of a finding: parse once


def _path(doc: _Doc, sp: Span, kinds) -> list | None:
    """The nodes from the module down to the `kinds` node whose span is exactly `sp`."""
    key = (sp.line, sp.column, sp.end_line, sp.end_column)
    path = [doc.tree]

    def visit(node) -> bool:
        for child in ast.iter_child_nodes(node):
            if getattr(child, "end_lineno", None) is not None:
                s = doc.span(child)
                if (min(s[0], _start(child)), s[1] if _start(child) == s[0] else 0) > key[:2] or s[2:] < key[2:]:
                    continue
                path.append(child)
                if s == key and isinstance(child, kinds):
                    return True
            else:
                path.append(child)
            if visit(child):
                return True
            path.pop()
        return False

    return path if visit(doc.tree) else None


# ----------------------------------------------------------------- statements and the lines they own
def _start(node) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])


def _compound(node) -> bool:
    return hasattr(node, "body") or hasattr(node, "cases")


def _is_elif(doc: _Doc, parent, node) -> bool:
    return (isinstance(parent, ast.If) and len(parent.orelse) == 1 and parent.orelse[0] is node
            and doc.text(node.lineno)[doc.col(node.lineno, node.col_offset):].startswith("elif"))


def _line_starts_with(doc: _Doc, node) -> bool:
    """Only indentation precedes the statement on its first line (no header, no `;`)."""
    first = _start(node)
    if first > 1 and doc.text(first - 1).endswith("\\"):
        return False
    if first != node.lineno:
        return doc.text(first).lstrip().startswith("@")
    return not doc.text(first)[:doc.col(first, node.col_offset)].strip()


def _line_ends_with(doc: _Doc, node, semicolon: bool = False) -> bool:
    rest = doc.text(node.end_lineno)[doc.col(node.end_lineno, node.end_col_offset):].strip()
    if semicolon and rest.startswith(";"):
        rest = rest[1:].strip()
    return not rest or rest.startswith("#")


@dataclass
class _Site:
    """Where a statement's change is made: lines `first`..`last`, rewritten as a whole.

    mode "line": the statement owns its lines; "group": it shares a line with `;`
    siblings (the line is rewritten); "suite": it is in a one-line body (`if x: y`), and
    the compound statement holding it is rewritten."""

    first: int
    last: int
    mode: str
    stmt: ast.stmt
    seq: list  # the body list holding stmt
    parent: ast.AST
    index: int  # stmt's index in its `;` line (mode "group")


def _site(doc: _Doc, path: list) -> _Site | None:
    node, parent = path[-1], path[-2]
    if _is_elif(doc, parent, node):
        return None
    seq = next((v for _, v in ast.iter_fields(parent) if isinstance(v, list) and any(s is node for s in v)), None)
    if seq is None:
        return None
    i = next(k for k, s in enumerate(seq) if s is node)
    j0 = j1 = i
    while j0 > 0 and seq[j0 - 1].end_lineno == seq[j0].lineno:
        j0 -= 1
    while j1 < len(seq) - 1 and seq[j1 + 1].lineno == seq[j1].end_lineno:
        j1 += 1
    if j0 == j1 and _line_starts_with(doc, node) and _line_ends_with(doc, node):
        return _Site(_start(node), node.end_lineno, "line", node, seq, parent, 0)
    if not _compound(node) and _line_starts_with(doc, seq[j0]) and _line_ends_with(doc, seq[j1], True):
        return _Site(seq[j0].lineno, seq[j1].end_lineno, "group", node, seq, parent, i - j0)
    k = len(path) - 2  # a one-line body: rewrite the compound statement holding it
    while k > 0 and not isinstance(path[k], ast.stmt):
        k -= 1
    while k > 1 and _is_elif(doc, path[k - 1], path[k]):
        k -= 1
    owner = path[k]
    if _compound(node) or not isinstance(owner, ast.stmt) or not (
            _line_starts_with(doc, owner) and _line_ends_with(doc, owner)):
        return None
    return _Site(_start(owner), owner.end_lineno, "suite", node, seq, parent, 0)


def _statement(doc: _Doc, sp: Span | None) -> tuple[list, _Site] | None:
    path = _path(doc, sp, ast.stmt) if sp is not None else None
    site = _site(doc, path) if path else None
    return (path, site) if site else None


def _comments_above(doc: _Doc, site: _Site) -> int:
    """The first line of the comment block directly above the site (at its indentation):
    inserting "before a statement" goes above the comments that describe it."""
    if site.mode == "suite":
        return site.first
    bound = 0
    for child in ast.iter_child_nodes(site.parent):
        for c in ([child] if hasattr(child, "end_lineno") else ast.iter_child_nodes(child)):
            end = getattr(c, "end_lineno", None)
            if end is not None and end < site.first:
                bound = max(bound, end)
    first, indent = site.first, doc.indent(site.first)
    while first - 1 > bound and doc.text(first - 1).strip().startswith("#") and doc.indent(first - 1) == indent:
        first -= 1
    return first


# ----------------------------------------------------------------- rewriting a site with libcst
class _Apply(cst.CSTTransformer):
    """Replace the target statements (whole lines) or the line holding a target small
    statement (split off onto its own line first) with `op(statements)`."""

    def __init__(self, lines: tuple, small, op, unit: str):
        super().__init__()
        self.lines, self.small, self.op, self.unit = lines, small, op, unit

    def _block(self, original, updated) -> list | None:
        out, i, hit = [], 0, False
        while i < len(original):
            o, u = original[i], updated[i]
            if self.lines and o is self.lines[0]:
                out += self.op(list(updated[i:i + len(self.lines)]))
                i, hit = i + len(self.lines), True
                continue
            if self.small is not None and isinstance(o, cst.SimpleStatementLine) and \
                    any(s is self.small for s in o.body):
                out += self._split(o.body, u.body, u.leading_lines, u.trailing_whitespace)
                hit = True
            else:
                out.append(u)
            i += 1
        return out if hit else None

    def _split(self, original, updated, leading, trailing) -> list:
        k = next(j for j, s in enumerate(original) if s is self.small)
        if len(original) == 1:
            return self.op([cst.SimpleStatementLine(body=updated, leading_lines=leading,
                                                    trailing_whitespace=trailing)])
        plain = cst.MaybeSentinel.DEFAULT
        before, after = list(updated[:k]), list(updated[k + 1:])
        out = []
        if before:
            before[-1] = before[-1].with_changes(semicolon=plain)
            out.append(cst.SimpleStatementLine(body=before, leading_lines=leading))
        mid = cst.SimpleStatementLine(body=[updated[k].with_changes(semicolon=plain)],
                                      leading_lines=() if before else leading)
        out += self.op([mid.with_changes(trailing_whitespace=trailing) if not after else mid])
        if after:
            out.append(cst.SimpleStatementLine(body=after, trailing_whitespace=trailing))
        return out

    def leave_IndentedBlock(self, original, updated):
        body = self._block(original.body, updated.body)
        return updated if body is None else updated.with_changes(body=body or [_pass()])

    def leave_Module(self, original, updated):
        body = self._block(original.body, updated.body)
        return updated if body is None else updated.with_changes(body=body)

    def leave_SimpleStatementSuite(self, original, updated):
        if self.small is None or not any(s is self.small for s in original.body):
            return updated
        lines = self._split(original.body, updated.body, (), cst.TrailingWhitespace())
        return cst.IndentedBlock(body=lines or [_pass()], header=updated.trailing_whitespace, indent=self.unit)


def _pass() -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(body=[cst.Pass()])


def _parse_site(doc: _Doc, first: int, last: int):
    """The lines parsed under a header that makes their indentation legal: (prefix, module, body)."""
    indent = doc.indent(first)
    prefix = ("if True:" if indent else "pass") + (doc.eol(first) or doc.newline)
    module = cst.parse_module(prefix + "".join(doc.lines[first - 1:last]))
    body = module.body[0].body.body if indent else module.body[1:]
    return prefix, module, body


def _small_at(module, doc: _Doc, first: int, stmt: ast.stmt):
    line, col = stmt.lineno - first + 2, doc.col(stmt.lineno, stmt.col_offset)
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return next((n for n, p in positions.items() if isinstance(n, cst.BaseSmallStatement)
                 and (p.start.line, p.start.column) == (line, col)), None)


def _targets(doc: _Doc, site: _Site, module, body, first: int):
    """(whole statement lines, small statement) to hand to `_Apply`."""
    if site.mode == "line":
        return tuple(body), None
    small = body[-1].body[site.index] if site.mode == "group" else _small_at(module, doc, first, site.stmt)
    if small is None:
        raise ValueError("statement not found")
    return (), small


def _rewrite(doc: _Doc, site: _Site, op, first: int | None = None, last: int | None = None) -> tuple:
    first = site.first if first is None else first
    last = site.last if last is None else last
    prefix, module, body = _parse_site(doc, first, last)
    lines, small = _targets(doc, site, module, body, first)
    code = module.visit(_Apply(lines, small, op, doc.unit)).code
    if not code.startswith(prefix):
        return None, None
    if doc.eol(last) and not code.endswith(("\n", "\r")):
        code += doc.eol(last)  # libcst drops a final lone "\r"
    return _diff(doc, first, "".join(doc.lines[first - 1:last]), code[len(prefix):]), (first, last)


def _diff(doc: _Doc, first: int, old: str, new: str) -> Replacement | None:
    """The replacement of only the lines that differ."""
    a, b = split_lines(old), split_lines(new)
    p = 0
    while p < len(a) and p < len(b) and a[p] == b[p]:
        p += 1
    s = 0
    while s < len(a) - p and s < len(b) - p and a[-1 - s] == b[-1 - s]:
        s += 1
    gone, text = len(a) - p - s, "".join(b[p:len(b) - s])
    if not gone and not text:
        return None
    start = first + p
    end = _past(doc, start + gone - 1) if gone else (start, 0)
    return Replacement(Span(start, 0, *end), text)


def _past(doc: _Doc, n: int) -> tuple[int, int]:
    """The position just past line n, its line break included."""
    return (n + 1, 0) if doc.eol(n) else (n, len(doc.text(n)))


def _with_indents(node, default: str):
    """Blocks that used the parsed piece's default indentation say so, to move elsewhere."""

    class Fill(cst.CSTTransformer):
        def leave_IndentedBlock(self, original, updated):
            return updated.with_changes(indent=default) if updated.indent is None else updated

    return node.visit(Fill())


# ----------------------------------------------------------------- statement edits
def _insert(code: str, after: bool):
    def handler(doc: _Doc, e: Edit):
        found = _statement(doc, e.span)
        if found is None or not e.name:
            return None
        new = cst.parse_statement(code.format(name=e.name))
        return _insert_stmt(doc, found[1], new, after)
    return handler


def _insert_stmt(doc: _Doc, site: _Site, new, after: bool):
    if after:
        return [_rewrite(doc, site, lambda stmts: [*stmts, new])]
    return [_rewrite(doc, site, lambda stmts: [new, *stmts], first=_comments_above(doc, site))]


def _no_grad(doc: _Doc, edits: list) -> list | None:
    """Wrap each statement (consecutive ones together) in `with torch.no_grad():`, and
    import torch when the module has no name for it."""
    sites = []
    for e in edits:
        found = _statement(doc, e.span)
        if found is None:
            return None
        if not any(found[1].stmt is s.stmt for _, s in sites):
            sites.append(found)
    sites.sort(key=lambda f: f[1].first)
    context, needs_import = _grad_off(doc)
    ctx = cst.parse_expression(context)

    def wrap(stmts):
        inner = [stmts[0].with_changes(leading_lines=()), *stmts[1:]]
        return [cst.With(items=[cst.WithItem(item=ctx)], body=cst.IndentedBlock(body=inner, indent=doc.unit),
                         leading_lines=stmts[0].leading_lines)]

    changes, run = [], []
    for path, site in sites + [(None, None)]:
        if run and (site is None or site.mode != "line" or run[-1].mode != "line" or site.seq is not run[-1].seq
                    or _index(site) != _index(run[-1]) + 1):
            changes.append(_rewrite(doc, run[0], wrap, last=run[-1].last))
            run = []
        if site is not None:
            run.append(site)
    if needs_import:
        top = next(s for s in doc.tree.body if _start(s) <= sites[0][1].first and s.end_lineno >= sites[0][1].last)
        changes.append(_import_torch(doc, top))
    return changes


def _index(site: _Site) -> int:
    return next(k for k, s in enumerate(site.seq) if s is site.stmt)


def _top_imports(tree: ast.Module):
    for stmt in tree.body:
        blocks = [stmt.body, getattr(stmt, "orelse", [])] if isinstance(stmt, (ast.If, ast.Try)) else [[stmt]]
        for block in blocks:
            yield from (s for s in block if isinstance(s, (ast.Import, ast.ImportFrom)))


def _grad_off(doc: _Doc) -> tuple[str, bool]:
    """The expression for `torch.no_grad()` under this module's imports, and whether
    `import torch` must be added (torch unbound, or bound only under another name)."""
    alias = no_grad = None
    for imp in _top_imports(doc.tree):
        if isinstance(imp, ast.Import):
            for a in imp.names:
                if a.asname is None and a.name.split(".")[0] == "torch":
                    return "torch.no_grad()", False
                if a.name == "torch":
                    alias = alias or a.asname
        elif imp.module == "torch" and not imp.level:
            no_grad = no_grad or next((a.asname or a.name for a in imp.names if a.name == "no_grad"), None)
    if alias:
        return f"{alias}.no_grad()", False
    if no_grad:
        return f"{no_grad}()", False
    return "torch.no_grad()", True


def _import_torch(doc: _Doc, top: ast.stmt) -> tuple:
    """`import torch` after the last top-level import before `top` (else after the module
    docstring and `from __future__` imports, else before `top`)."""
    body = doc.tree.body
    before = body[:next(k for k, s in enumerate(body) if s is top)]
    anchor = next((s for s in reversed(before) if isinstance(s, (ast.Import, ast.ImportFrom))), None)
    if anchor is None:
        for k, s in enumerate(before):
            docstring = k == 0 and isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) \
                and isinstance(s.value.value, str)
            if not (docstring or (isinstance(s, ast.ImportFrom) and s.module == "__future__")):
                break
            anchor = s
    if anchor is None:
        n = _start(top)
        return Replacement(Span(n, 0, n, 0), "import torch" + doc.newline), (n, top.end_lineno)
    site = _site(doc, [doc.tree, anchor])
    if site is None:
        return None, None
    n = site.last  # after the whole line: `import os; x = (...)` may go on
    if doc.eol(n):
        return Replacement(Span(n + 1, 0, n + 1, 0), "import torch" + doc.newline), (site.first, n)
    end = len(doc.text(n))
    return Replacement(Span(n, end, n, end), doc.newline + "import torch"), (site.first, n)


def _move(doc: _Doc, e: Edit) -> list | None:
    """Remove the statement at `span`; put it at the top of the body starting at `target`
    (move_into_loop) or after the statement at `target` (move_after)."""
    found, dest = _statement(doc, e.span), _statement(doc, e.target)
    if found is None or dest is None:
        return None
    _, site = found
    _, module, body = _parse_site(doc, site.first, site.last)
    if site.mode == "line":
        moved = _with_indents(body[-1].with_changes(leading_lines=()), module.default_indent)
    else:
        small = _targets(doc, site, module, body, site.first)[1]
        moved = cst.SimpleStatementLine(body=[_with_indents(small, module.default_indent)
                                              .with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
    removal = _removal(doc, site)
    return [removal, *_insert_stmt(doc, dest[1], moved, after=e.kind == "move_after")]


def _removal(doc: _Doc, site: _Site) -> tuple:
    """Delete the statement: its whole lines (with their comments), `pass` if its block empties."""
    if site.mode != "line":
        return _rewrite(doc, site, lambda stmts: [])
    old = "".join(doc.lines[site.first - 1:site.last])
    empties = len(site.seq) == 1 and not isinstance(site.parent, ast.Module)
    new = doc.indent(site.stmt.lineno) + "pass" + (doc.eol(site.last) or "") if empties else ""
    return _diff(doc, site.first, old, new), (site.first, site.last)


def _delete(doc: _Doc, e: Edit):
    """Delete the statement at `span`, or the decorator at `span` from its function or class."""
    path = _path(doc, e.span, (ast.stmt, ast.expr))
    if path is None:
        return None
    node, owner = path[-1], path[-2]
    if isinstance(node, ast.stmt):
        site = _site(doc, path)
        return [_removal(doc, site)] if site else None
    k = next((k for k, d in enumerate(getattr(owner, "decorator_list", ())) if d is node), None)
    site = _site(doc, path[:-1]) if k is not None else None
    if site is None or site.mode != "line":
        return None

    def op(stmts):  # the comments above the decorator stay, above what follows it
        d = stmts[-1]
        decorators, kept = list(d.decorators), d.decorators[k].leading_lines
        del decorators[k]
        if k < len(decorators):
            decorators[k] = decorators[k].with_changes(leading_lines=[*kept, *decorators[k].leading_lines])
            return [*stmts[:-1], d.with_changes(decorators=decorators)]
        return [*stmts[:-1], d.with_changes(decorators=decorators,
                                             lines_after_decorators=[*kept, *d.lines_after_decorators])]
    return [_rewrite(doc, site, op)]


def _unwrap(doc: _Doc, e: Edit):
    """Replace the `with` statement (or the `if` without `else`) at `span` by its body,
    dedented (libcst re-indents it); a comment on the header line is kept above the body."""
    found = _statement(doc, e.span)
    if found is None or found[1].mode != "line" or not (
            isinstance(found[1].stmt, (ast.With, ast.AsyncWith)) or isinstance(found[1].stmt, ast.If)
            and not found[1].stmt.orelse):
        return None

    def op(stmts):
        w = stmts[-1]
        if isinstance(w.body, cst.SimpleStatementSuite):
            inner = [cst.SimpleStatementLine(body=w.body.body, trailing_whitespace=w.body.trailing_whitespace)]
            lead = list(w.leading_lines)
        else:
            inner = list(w.body.body)
            comment = w.body.header.comment
            lead = [*w.leading_lines, *([cst.EmptyLine(comment=comment)] if comment else [])]
        inner[0] = inner[0].with_changes(leading_lines=[*lead, *inner[0].leading_lines])
        return [*stmts[:-1], *inner]
    return [_rewrite(doc, found[1], op)]


# ----------------------------------------------------------------- expression edits
def _expression(doc: _Doc, sp: Span, kinds=ast.expr):
    """(ast node, its libcst module, its libcst expression without the parentheses
    added to parse it): the expression parsed alone, on its own."""
    path = _path(doc, sp, kinds)
    if path is None:
        return None
    module = cst.parse_module("(" + doc.segment(sp) + ")" + doc.newline)
    expr = module.body[0].body[0].value
    return path, module, expr.with_changes(lpar=expr.lpar[1:], rpar=expr.rpar[:-1])


def _method(*names: str):
    """`X` -> `X.name()`, or `X.a().b()` for several names (X parenthesized if it needs it)."""
    def handler(doc: _Doc, e: Edit):
        found = _expression(doc, e.span)
        if found is None or isinstance(getattr(found[0][-1], "ctx", None), (ast.Store, ast.Del)):
            return None
        _, module, new = found
        new = _parenthesized(new)
        for name in names:
            new = cst.Call(func=cst.Attribute(value=new, attr=cst.Name(name)))
        return [(Replacement(e.span, module.code_for_node(new)), _region(doc, found[0]))]
    return handler


def _detach_each(doc: _Doc, e: Edit):
    """`X` (a list of tensors) -> `[t.detach() for t in X]`; of tuples, named in `e.name` ("h,c")
    -> `[(h.detach(), c.detach()) for h, c in X]`, or not named ("tuple") -> `[tuple(v.detach()
    for v in t) for t in X]`."""
    found = _expression(doc, e.span, (ast.Name, ast.Attribute, ast.Subscript))
    if found is None or isinstance(getattr(found[0][-1], "ctx", None), (ast.Store, ast.Del)):
        return None
    _, module, expr = found
    names = e.name.split(",") if e.name not in ("", "tuple") else []
    item, each = ("t", "tuple(v.detach() for v in t)") if e.name == "tuple" else \
        (", ".join(names), "(" + ", ".join(f"{n}.detach()" for n in names) + ")") if names else ("t", "t.detach()")
    new = cst.parse_expression(f"[{each} for {item} in {module.code_for_node(expr)}]")
    return [(Replacement(e.span, module.code_for_node(new)), _region(doc, found[0]))]


def _without_call(method: str, attribute: str | None = None):
    """`X.method()` (or `X.attribute`) becomes `X`, with X's own parentheses, so
    `(a + b).detach() * c` stays `(a + b) * c`."""
    def handler(doc: _Doc, e: Edit):
        found = _expression(doc, e.span, (ast.Call, ast.Attribute))
        if found is None:
            return None
        path, module, expr = found
        node = path[-1]
        inner = _receiver(node, expr, method)
        if inner is None and attribute is not None and isinstance(node, ast.Attribute) and node.attr == attribute \
                and isinstance(node.ctx, ast.Load) and isinstance(expr, cst.Attribute):
            inner = expr.value
        return None if inner is None else [(Replacement(e.span, module.code_for_node(inner)), _region(doc, path))]
    return handler


def _receiver(node: ast.expr, expr: cst.BaseExpression, method: str) -> cst.BaseExpression | None:
    """X, if `node` (`expr` in libcst) is the call `X.method()` without arguments."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method \
            and not node.args and not node.keywords and isinstance(expr, cst.Call) \
            and isinstance(expr.func, cst.Attribute):
        return expr.func.value
    return None


def _parenthesized(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` in parentheses unless it has them or binds tighter than any operator around it."""
    if expr.lpar or isinstance(expr, _ATOMS):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _soft_argmax(doc: _Doc, e: Edit):
    """`torch.argmax(x, dim)` -> the expected index under `softmax(x)` along `dim` (argmin:
    under `softmax(-x)`), a float with the same shape that gradients flow through.  `x` is
    written three times, so only a name, attribute or plain subscript is accepted."""
    found = _expression(doc, e.span, ast.Call)
    if found is None:
        return None
    path, _, _ = found
    call = path[-1]
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in ("argmax", "argmin"):
        return None
    args = list(call.args)
    if _root(call.func.value) in _modules(doc.tree):  # torch.argmax(x, ...)
        torch = doc.source(call.func.value)
        if not args:
            return None
        x = args.pop(0)
    elif "torch" in _modules(doc.tree):  # x.argmax(...)
        torch, x = "torch", call.func.value
    else:
        return None
    kw = {k.arg: k.value for k in call.keywords}
    dim = kw.pop("dim", kw.pop("axis", args.pop(0) if args else None))
    keepdim = kw.pop("keepdim", args.pop(0) if args else None)
    simple = isinstance(x, (ast.Name, ast.Attribute, ast.Subscript)) and not any(
        isinstance(n, (ast.Call, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Lambda)) for n in ast.walk(x))
    if args or kw or not simple:
        return None
    keep = keepdim is not None and not (isinstance(keepdim, ast.Constant) and keepdim.value is False)
    if keep and (dim is None or not isinstance(keepdim, ast.Constant)):
        return None
    xs = doc.source(x)
    sign = "-" if call.func.attr == "argmin" else ""
    index = f"dtype={xs}.dtype, device={xs}.device"
    if dim is None:
        new = f"({torch}.softmax({sign}{xs}.flatten(), 0) * {torch}.arange({xs}.numel(), {index})).sum()"
    else:
        d = doc.source(dim)
        new = (f"({torch}.softmax({sign}{xs}.movedim({d}, -1), -1) * {torch}.arange({xs}.shape[{d}], {index}))"
               f".sum(-1)" + (f".unsqueeze({d})" if keep else ""))
    return [(Replacement(e.span, new), _region(doc, path))]


_MIRROR = {ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Lt: ast.Gt, ast.LtE: ast.GtE}


def _soft_compare(doc: _Doc, e: Edit):
    """A comparison used as a number (`(c).float()`, or `c` itself in arithmetic) becomes a
    probability.  A threshold (`target` None, `t` a literal or a name): `p > t` becomes `p`
    when `name` is "prob" (a sigmoid's output), the logit's `(z - t).sigmoid()` otherwise,
    `<` their complement.  An
    argmax (`target` is the argmax call, `name` the variable given its result, if any):
    `pred == y` becomes softmax(x)'s probability of class `y` (`!=`: one minus it)."""
    path = _path(doc, e.span, ast.expr)
    if path is None:
        return None
    node = path[-1]
    compare = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else node
    if not isinstance(compare, ast.Compare) or len(compare.ops) != 1:
        return None
    op, left, right = compare.ops[0], compare.left, compare.comparators[0]
    if e.target is None:
        if _literal(left) is not None:
            left, right, op = right, left, _MIRROR.get(type(op), type(op))()
        greater, t = isinstance(op, (ast.Gt, ast.GtE)), _literal(right)
        p = doc.source(left) if isinstance(left, _ATOMS_AST) else f"({doc.source(left)})"
        if not isinstance(op, tuple(_MIRROR)) or t is None and not isinstance(right, (ast.Name, ast.Attribute)):
            return None  # a threshold is a literal or a name (`x > threshold`)
        if e.name == "prob":
            new = p if greater else f"(1 - {p})"
        elif t == 0:
            new = f"{p}.sigmoid()" if greater else f"(-{p}).sigmoid()"
        else:
            a, b = (doc.source(left), doc.source(right)) if greater else (doc.source(right), doc.source(left))
            new = f"({a} - {b}).sigmoid()"
    else:
        found = _path(doc, e.target, ast.Call)
        argmax = found[-1] if found else None
        if argmax is None or not isinstance(argmax.func, ast.Attribute) or not isinstance(op, (ast.Eq, ast.NotEq)):
            return None
        args, kw = list(argmax.args), {k.arg: k.value for k in argmax.keywords}
        x = args.pop(0) if _root(argmax.func.value) in _modules(doc.tree) and args else argmax.func.value
        dim = kw.pop("dim", args.pop(0) if args else None)
        ours = [s for s in (left, right) if s is argmax or isinstance(s, ast.Name) and s.id == e.name]
        if dim is None or args or kw or len(ours) != 1:
            return None
        y = right if ours[0] is left else left
        xs, d, ys = doc.source(x), doc.source(dim), doc.source(y)
        xs = xs if isinstance(x, _ATOMS_AST) else f"({xs})"
        if _integer(doc, y):
            prob = f"{xs}.softmax({d}).select({d}, {ys})"
        else:
            ys = ys if isinstance(y, _ATOMS_AST) else f"({ys})"
            prob = f"{xs}.softmax({d}).gather({d}, {ys}.unsqueeze({d})).squeeze({d})"
        new = prob if isinstance(op, ast.Eq) else f"(1 - {prob})"
    return [(Replacement(e.span, new), _region(doc, path))]


_ATOMS_AST = (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.Constant)


def _literal(node):
    """The number a literal (`0.5`, `-1`) is, else None."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign, node = (-1 if isinstance(node.op, ast.USub) else 1), node.operand
    ok = isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    return sign * node.value if ok else None


def _integer(doc: _Doc, y: ast.expr) -> bool:
    """Whether `y` is a plain int: a literal, or a name the file only binds as a `range` loop
    variable (a class index), not a tensor of labels."""
    if isinstance(_literal(y), int):
        return True
    if not isinstance(y, ast.Name):
        return False
    binds = [n for n in ast.walk(doc.tree) if isinstance(n, ast.Name) and n.id == y.id and isinstance(n.ctx, ast.Store)]
    loops = [n for n in ast.walk(doc.tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
             and n.target.id == y.id and isinstance(n.iter, ast.Call) and getattr(n.iter.func, "id", "") == "range"]
    return bool(binds) and len(loops) == len(binds)


def _to_torch(doc: _Doc, e: Edit):
    """The function at `span`, computed with torch where it used numpy (see `numpy_port`);
    nothing if any numpy use is left."""
    from gradguard.numpy_port import NumpyToTorch

    found = _statement(doc, e.span)
    numpy = {a.asname or a.name for n in _top_imports(doc.tree) if isinstance(n, ast.Import)
             for a in n.names if a.name == "numpy"}
    if found is None or found[1].mode != "line" or "torch" not in _modules(doc.tree):
        return None

    def op(stmts):
        new = stmts[-1].visit(NumpyToTorch(numpy, "torch"))
        left = {n.id for n in ast.walk(ast.parse(cst.Module(body=[new]).code)) if isinstance(n, ast.Name)}
        if left & numpy:
            raise ValueError("numpy is still used")
        return [*stmts[:-1], new]
    return [_rewrite(doc, found[1], op)]


def _unwrap_item(doc: _Doc, e: Edit):
    """`torch.tensor(X.item())` becomes `X` (parenthesized unless an atom)."""
    found = _expression(doc, e.span, ast.Call)
    if found is None or not (isinstance(found[2], cst.Call) and len(found[2].args) == 1 and len(found[0][-1].args) == 1):
        return None
    path, module, call = found
    inner = _receiver(path[-1].args[0], call.args[0].value, "item")
    return None if inner is None else [(Replacement(e.span, module.code_for_node(_parenthesized(inner))),
                                        _region(doc, path))]


def _unwrap_numpy(doc: _Doc, e: Edit):
    """`torch.from_numpy(x.cpu().data.numpy()[idx])` becomes `x[idx]`: the tensor itself,
    indexed, instead of a copy made through numpy (`.cpu()`, `.data`, `.detach()` dropped)."""
    found = _expression(doc, e.span, ast.Call)
    if found is None or not (isinstance(found[2], cst.Call) and len(found[2].args) == 1):
        return None
    path, module, call = found
    arg, index = call.args[0].value, None
    if isinstance(arg, cst.Subscript):
        arg, index = arg.value, arg.slice
    if not (isinstance(arg, cst.Call) and isinstance(arg.func, cst.Attribute) and arg.func.attr.value == "numpy"
            and not arg.args):
        return None
    base = arg.func.value
    while True:  # `.cpu()`, `.detach()`, `.data`: what made the copy for numpy
        if isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and not base.args \
                and base.func.attr.value in ("cpu", "detach"):
            base = base.func.value
        elif isinstance(base, cst.Attribute) and base.attr.value == "data":
            base = base.value
        else:
            break
    new = _parenthesized(base) if index is None else cst.Subscript(value=_parenthesized(base), slice=index)
    return [(Replacement(e.span, module.code_for_node(new)), _region(doc, path))]


def _stack(doc: _Doc, e: Edit):
    """`torch.tensor(xs)` becomes `torch.stack(xs)` (xs: a list of tensors now)."""
    found = _expression(doc, e.span, ast.Call)
    if found is None or not (isinstance(found[2], cst.Call) and isinstance(found[2].func, cst.Attribute)):
        return None
    path, module, call = found
    new = call.with_changes(func=call.func.with_changes(attr=cst.Name("stack")))
    return [(Replacement(e.span, module.code_for_node(new)), _region(doc, path))]


def _call_argument(doc: _Doc, e: Edit, keyword: str, position: int | None):
    """(path, module, call, its arguments, the index of the one given as `keyword` or as the
    positional argument at `position`) of the call at the edit's span; None if not given."""
    found = _expression(doc, e.span, ast.Call)
    if found is None or not isinstance(found[2], cst.Call):
        return None
    path, module, call = found
    args = list(call.args)
    k = next((k for k, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword), None)
    positional = [i for i, a in enumerate(args) if a.keyword is None and not a.star]
    if k is None and position is not None and position < len(positional):
        k = positional[position]
    return None if k is None else (path, module, call, args, k)


def _grad_of_base(doc: _Doc, e: Edit):
    """`torch.autograd.grad(y, x[a:b], ...)` -> `tuple(g[a:b] for g in torch.autograd.grad(y, x, ...))`:
    the gradient of the tensor the outputs used, sliced as the view was (the rest of the
    expression, `[0]` and all, reads the same tuple)."""
    found = _call_argument(doc, e, "inputs", 1)
    if found is None or not isinstance(found[3][found[4]].value, cst.Subscript):
        return None
    path, module, call, args, k = found
    view = args[k].value
    args[k] = args[k].with_changes(value=view.value)
    index = module.code_for_node(view.with_changes(value=cst.Name("g")))
    new = cst.parse_expression(f"tuple({index} for g in {module.code_for_node(call.with_changes(args=args))})")
    return [(Replacement(e.span, module.code_for_node(new)), _region(doc, path))]


def _keyword_true(keyword: str):
    """`keyword=True` in the call at the edit's span (`retain_graph`, `create_graph`)."""
    return lambda doc, e: _set_true(doc, e, keyword)


def _set_true(doc: _Doc, e: Edit, keyword: str):
    return _set_keyword(doc, e, keyword, cst.Name("True"))


def _set_keyword(doc: _Doc, e: Edit, keyword: str, value: cst.BaseExpression):
    """`keyword=value` in the call at the edit's span, replacing the argument if it is given."""
    found = _expression(doc, e.span, ast.Call)
    if found is None:
        return None
    path, module, call = found
    if not isinstance(call, cst.Call):
        return None
    args = list(call.args)
    k = next((k for k, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword), None)
    positional = [k for k, a in enumerate(args) if a.keyword is None and not a.star]
    slot = _flag_slot(doc, path[-1], keyword)
    if k is None and slot is not None and len(positional) > slot:
        k = positional[slot]
    if k is not None:
        args[k] = args[k].with_changes(value=value)
    else:
        new = cst.Arg(value=value, keyword=cst.Name(keyword),
                      equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                            whitespace_after=cst.SimpleWhitespace("")))
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        last = args[-1] if args else None
        tail = last.comma.whitespace_after if last and isinstance(last.comma, cst.Comma) else None
        lead = args[-2].comma.whitespace_after if len(args) > 1 else call.whitespace_before_args
        if isinstance(tail, cst.ParenthesizedWhitespace) and isinstance(lead, cst.ParenthesizedWhitespace):
            # one argument a line, trailing comma: a new line like the last one, its comment left in place
            args[-1] = last.with_changes(comma=last.comma.with_changes(
                whitespace_after=lead.with_changes(first_line=tail.first_line, empty_lines=())))
            new = new.with_changes(comma=last.comma.with_changes(
                whitespace_after=tail.with_changes(first_line=cst.TrailingWhitespace())))
        elif tail is not None:
            new = new.with_changes(comma=last.comma)
            args[-1] = last.with_changes(comma=space)
        elif args:
            args[-1] = last.with_changes(comma=space)
        args.append(new)
    return [(Replacement(e.span, module.code_for_node(call.with_changes(args=args))), _region(doc, path))]


def _inplace_false(doc: _Doc, e: Edit):
    """`nn.ReLU(inplace=True)` -> `nn.ReLU(inplace=False)`; `e.name` is the flag's position when
    it is passed positionally (`nn.LeakyReLU(0.2, True)`)."""
    found = _call_argument(doc, e, "inplace", int(e.name) if e.name.isdigit() else None)
    if found is None:
        return None
    path, module, call, args, k = found
    args[k] = args[k].with_changes(value=cst.Name("False"))
    return [(Replacement(e.span, module.code_for_node(call.with_changes(args=args))), _region(doc, path))]


def _flag_slot(doc: _Doc, call: ast.Call, keyword: str) -> int | None:
    """Which positional argument is the flag: `t.backward(g, True)` (retain_graph),
    `torch.autograd.grad(o, i, g, True, True)` (retain_graph, create_graph)."""
    f = call.func
    if not isinstance(f, ast.Attribute):
        return None
    owner = doc.source(f.value)
    autograd = owner == "autograd" or owner.endswith(".autograd")
    first = {("grad", True): 3, ("backward", True): 2, ("backward", False): 1}.get((f.attr, autograd))
    return None if first is None else first + (keyword == "create_graph")


def _out_of_place(doc: _Doc, e: Edit):
    """`x += y` -> `x = x + y`; `x.relu_()` -> `x = x.relu()` as a whole statement; inside an
    expression `h.sigmoid_()` -> `h.sigmoid()`."""
    path = _path(doc, e.span, (ast.AugAssign, ast.Call))
    if path is None:
        return None
    if isinstance(path[-1], ast.AugAssign):
        return _out_of_place_aug(doc, e.span, path, item=e.name == "item")
    chain = _inplace_chain(doc, path)
    if chain is not None:
        return chain
    _, module, node = _expression(doc, e.span, ast.Call)
    call, stmt = path[-1], path[-2]
    name = getattr(call.func, "attr", "")
    if not (isinstance(call.func, ast.Attribute) and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and K.has_out_of_place(name)):
        return None
    if not (isinstance(stmt, ast.Expr) and stmt.value is call and doc.span(stmt) == doc.span(call)):
        # inside an expression (`code = h.sigmoid_()`): the planner found no one else sees the tensor
        value = node.with_changes(func=node.func.with_changes(attr=cst.Name(name[:-1])))
        return [(Replacement(e.span, module.code_for_node(value)), _region(doc, path))]
    if _root(call.func.value) in _modules(doc.tree):  # torch.relu_(x): x = torch.relu(x)
        if not call.args or not isinstance(call.args[0], (ast.Name, ast.Attribute)):
            return None
        target = node.args[0].value
    elif isinstance(call.func.value, (ast.Name, ast.Attribute)):
        target = node.func.value
    else:
        return None
    value = node.with_changes(func=node.func.with_changes(attr=cst.Name(name[:-1])))
    new = cst.Assign(targets=[cst.AssignTarget(target.with_changes(lpar=[], rpar=[]))], value=value)
    return [(Replacement(e.span, module.code_for_node(new)), _region(doc, path))]


def _is_inplace_method(node) -> bool:
    return isinstance(node, ast.Call) and K.has_out_of_place(getattr(node.func, "attr", ""))


def _inplace_chain(doc: _Doc, path: list):
    """`state.mul_(0.9).add_(h)`, a statement of in-place methods on a name or attribute (the
    span is its last call): `state = state.mul(0.9).add(h)`.  None for anything else."""
    outer, stmt = path[-1], path[-2]
    receiver = outer.func.value if isinstance(outer.func, ast.Attribute) else None
    if not (isinstance(receiver, ast.Call) and _is_inplace_method(outer) and isinstance(stmt, ast.Expr)):
        return None
    calls = [outer]
    while isinstance(calls[-1].func.value, ast.Call) and _is_inplace_method(calls[-1].func.value):
        calls.append(calls[-1].func.value)
    if not isinstance(calls[-1].func.value, (ast.Name, ast.Attribute)) or \
            _root(calls[-1].func.value) in _modules(doc.tree):
        return None
    sp = doc.span(outer)
    _, module, node = _expression(doc, Span(*sp), ast.Call)

    def out_of_place(n):
        inner = n.func.value
        if isinstance(inner, cst.Call):
            inner = out_of_place(inner)
        return n.with_changes(func=n.func.with_changes(value=inner, attr=cst.Name(n.func.attr.value[:-1])))
    root = node
    for _ in calls:
        root = root.func.value
    new = cst.Assign(targets=[cst.AssignTarget(root.with_changes(lpar=[], rpar=[]))], value=out_of_place(node))
    return [(Replacement(Span(*sp), module.code_for_node(new)), _region(doc, path))]


def _out_of_place_aug(doc: _Doc, sp: Span, path: list, item: bool = False):
    """`x += y` -> `x = x + y`; `xs[i] += y` too when `item` (`xs` is a list: the item is
    replaced, where on a tensor `x[i] = x[i] + y` would still write x in place)."""
    aug = path[-1]
    if not isinstance(aug.target, (ast.Name, ast.Attribute)) and not (item and isinstance(aug.target, ast.Subscript)):
        return None
    module = cst.parse_module(doc.segment(sp) + doc.newline)
    node = module.body[0].body[0]
    op, value = node.operator, node.value
    if not value.lpar and _needs_parens(aug.value, aug.op):
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    binop = getattr(cst, type(op).__name__[:-len("Assign")])(
        whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)
    new = cst.Assign(targets=[cst.AssignTarget(node.target, whitespace_before_equal=op.whitespace_before,
                                               whitespace_after_equal=op.whitespace_after)],
                     value=cst.BinaryOperation(left=node.target, operator=binop, right=value))
    return [(Replacement(sp, module.code_for_node(new)), _region(doc, path))]


def _needs_parens(value: ast.expr, op: ast.operator) -> bool:
    if isinstance(value, ast.BinOp):
        return _PREC[type(value.op)] <= _PREC[type(op)]
    if isinstance(value, ast.UnaryOp):
        return isinstance(value.op, ast.Not)
    return isinstance(value, (ast.BoolOp, ast.Compare, ast.IfExp, ast.Lambda, ast.NamedExpr, ast.Yield,
                              ast.YieldFrom, ast.Tuple, ast.Starred))


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _modules(tree: ast.Module) -> set:
    """Names the module's imports bind to modules (`torch`, `F`, `nn`, ...)."""
    out = set()
    for imp in _top_imports(tree):
        if isinstance(imp, ast.Import):
            out.update(a.asname or a.name.split(".")[0] for a in imp.names)
        elif (imp.module or "").split(".")[0] == "torch":
            out.update(a.asname or a.name for a in imp.names if a.name in ("nn", "functional", "init", "F"))
    return out


# ----------------------------------------------------------------- putting edits together
def _merged(reps: list[Replacement]) -> list[Replacement] | None:
    """In source order, touching ones joined; None if two overlap."""
    out: list[Replacement] = []
    for r in sorted(reps, key=lambda r: (r.span.line, r.span.column, r.span.end_line, r.span.end_column)):
        if out:
            prev = out[-1]
            prev_end, start = (prev.span.end_line, prev.span.end_column), (r.span.line, r.span.column)
            if start < prev_end:
                return None
            if start == prev_end:
                out[-1] = Replacement(Span(prev.span.line, prev.span.column, r.span.end_line, r.span.end_column),
                                      prev.text + r.text)
                continue
        out.append(r)
    return out


def _region(doc: _Doc, path: list) -> tuple | None:
    """The lines of the statement holding the node at the end of `path`, to check alone."""
    k = max(i for i, n in enumerate(path) if isinstance(n, ast.stmt))
    while k > 1 and _is_elif(doc, path[k - 1], path[k]):
        k -= 1
    site = _site(doc, path[:k + 1])
    return (site.first, site.last) if site else None


def _parses(doc: _Doc, source: str, reps: list[Replacement], regions: list) -> bool:
    """Whether the edited file parses, checked on the rewritten statements alone (each
    under a header for its indentation): `ast.parse` of a 5,000-line file takes ~40 ms."""
    merged: list = []
    for region in sorted(regions, key=lambda r: (r is None, r or ())):
        if region is None:
            merged = None
            break
        a, b = region
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    texts, covered = [], 0
    for a, b in merged or ():
        inside = [r for r in reps if (r.span.line, r.span.column) >= (a, 0)
                  and (r.span.end_line, r.span.end_column) <= (b + 1, 0)]
        covered += len(inside)
        shifted = [Replacement(Span(r.span.line - a + 1, r.span.column, r.span.end_line - a + 1, r.span.end_column),
                               r.text) for r in inside]
        text = apply("".join(doc.lines[a - 1:b]), shifted)  # `pass`: a moved statement may leave nothing
        texts.append(("if True:\n" if doc.indent(a) else "") + text + "\n" + doc.indent(a) + "pass\n")
    if merged is None or covered != len(reps):
        texts = [apply(source, reps)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for text in texts:
                ast.parse(text)
    except SyntaxError:
        return False
    return True


_HANDLERS = {
    "detach": _method("detach"),
    "clone": _method("clone"),
    "item": _method("item"),
    "retain_graph": _keyword_true("retain_graph"),
    "create_graph": _keyword_true("create_graph"),
    "materialize_grads": _keyword_true("materialize_grads"),
    "grad_of_base": _grad_of_base,
    "grad_outputs": lambda doc, e: _set_keyword(doc, e, "grad_outputs",
                                                cst.parse_expression(f"torch.ones_like({e.name})")),
    "mean": _method("mean"),
    "sum": _method("sum"),
    "freeze_false": lambda doc, e: _set_keyword(doc, e, "freeze", cst.Name("False")),
    "inplace_false": _inplace_false,
    "out_of_place": _out_of_place,
    "detach_before": _insert("{name} = {name}.detach()", after=False),
    "detach_after": _insert("{name} = {name}.detach()", after=True),
    "detach_if_before": _insert("{name} = {name}.detach() if hasattr({name}, 'detach') else {name}", after=False),
    "detach_tuple_before": _insert("{name} = tuple(t.detach() for t in {name})", after=False),
    "detach_tuple_if_before": _insert("{name} = tuple(t.detach() for t in {name}) if {name} is not None else {name}",
                                      after=False),
    "detach_tuple_after": _insert("{name} = tuple(t.detach() for t in {name})", after=True),
    # a named tuple (`State(v, i)`) stays one: its fields are read by name
    "detach_named_tuple_before": _insert("{name} = type({name})(*(t.detach() for t in {name}))", after=False),
    "detach_named_tuple_if_before": _insert(
        "{name} = type({name})(*(t.detach() for t in {name})) if {name} is not None else {name}", after=False),
    "detach_named_tuple_after": _insert("{name} = type({name})(*(t.detach() for t in {name}))", after=True),
    "detach_list_before": _insert("{name} = [t.detach() for t in {name}]", after=False),
    "detach_list_if_before": _insert("{name} = [t.detach() for t in {name}] if {name} is not None else {name}",
                                     after=False),
    "detach_list_after": _insert("{name} = [t.detach() for t in {name}]", after=True),
    "clone_before": _insert("{name} = {name}.clone()", after=False),
    "retain_grad": _insert("{name}.retain_grad()", after=True),
    "requires_grad_after": _insert("{name}.requires_grad_()", after=True),
    "zero_grad": _insert("{name}.zero_grad()", after=False),
    "move_into_loop": _move,
    "move_after": _move,
    "remove_detach": _without_call("detach", attribute="data"),
    "new_leaf": _method("detach", "requires_grad_"),
    "detach_each": _detach_each,
    "remove_item": _without_call("item"),
    "stack": _stack,
    "unwrap_item": _unwrap_item,
    "unwrap_numpy": _unwrap_numpy,
    "soft_argmax": _soft_argmax,
    "soft_compare": _soft_compare,
    "to_torch": _to_torch,
    "unwrap": _unwrap,
    "delete": _delete,
    "replace": lambda doc, e: [(Replacement(e.span, e.name), None)],
}
