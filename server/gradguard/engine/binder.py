"""What is worth interpreting: a cheap pass over statements (not expressions) and text.

Every finding needs a *sink* — a backward call, an in-place op, a `.grad` read — and
a tensor that requires grad.  Large real projects are mostly code with neither, so the
engine skips a file whose text has no sink and source, and analyses a function that
module-level code never called only if its own text has a sink.  Regular expressions
over source text run at C speed; walking every expression node would cost as much as
parsing again.
"""
from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass
from functools import lru_cache

from gradguard import knowledge as K

# A backward or a gradient read: GG001, GG002, GG004 and the advisory rules need one.
BACKWARD = re.compile(r"\.backward\s*\(|autograd\s*\.\s*(?:grad|backward)\s*\(|manual_backward\s*\(|\.grad\b")
# An in-place op (`+=`, `x[i] = ...`, `x.add_(...)`): with something that requires grad, GG003 needs one.
INPLACE = re.compile(r"[A-Za-z0-9]_\s*\(|\]\s*[-+*/]?=[^=]|[-+*/]=")
# Something that requires grad without a backward in sight: parameters, requires_grad.
SOURCE = re.compile(r"requires_grad|Parameter\s*\(|parameters\s*\(|\.weight\b|\.bias\b")
# An op that raises on what it is given (`.numpy()`, an optimizer, `requires_grad = ...`, an
# inference tensor), with something that requires grad: parameters, requires_grad, or a layer.
_NUMPY = "|".join(sorted({d.rsplit(".", 1)[1] for d in K.TO_NUMPY.functions | K.TO_NUMPY.sequence_functions}))
RAISING = re.compile(r"\.numpy\s*\(|\b(?:np|numpy)\.(?:" + _NUMPY + r")\s*\(|optim\.\w+\s*\(|add_param_group"
                     r"|\.requires_grad\b|inference_mode")
LAYER = re.compile(r"\bnn\.[A-Z]\w*\s*\(")


def has_sink(text: str) -> bool:
    """Whether any rule can fire in this text: a backward, or an in-place op or an op that
    refuses some tensors (`.numpy()`) next to something that requires grad."""
    return BACKWARD.search(text) is not None or (
        (INPLACE.search(text) is not None or RAISING.search(text) is not None) and SOURCE.search(text) is not None) \
        or RAISING.search(text) is not None and LAYER.search(text) is not None \
        or "inference_mode" in text and INPLACE.search(text) is not None  # an inference tensor changed in place


def module_like(source: str, methods) -> frozenset:
    """Receivers (`model`, `self.net`) on which the text calls a method only nn.Modules have.
    The method names are searched first and the receiver read backwards from each match
    (a pattern starting at every identifier would be slow on large files)."""
    calls = re.compile(r"\.\s*(?:" + "|".join(sorted(methods)) + r")\s*\(")
    receiver = re.compile(r"([A-Za-z_][\w.]*)\s*$")
    out = set()
    for m in calls.finditer(source):
        line_start = source.rfind("\n", 0, m.start()) + 1
        found = receiver.search(source, line_start, m.start())
        if found:
            out.add(found.group(1))
    return frozenset(out)


def runs_backward(text: str, name: str) -> bool:
    """Whether the top-level function or class `name` of a module's text has a backward in its
    body (up to the next line that starts at column 0)."""
    return name in _backward_definitions(text)


_DEFINITION = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)", re.M)
_TOP_LEVEL = re.compile(r"^\S", re.M)


@lru_cache(maxsize=64)
def _backward_definitions(text: str) -> frozenset:
    """The top-level functions and classes of a module's text that have a backward in their body:
    found once per text, as a file asks a module about every name it imports from it."""
    out = set()
    for found in _DEFINITION.finditer(text):
        end = _TOP_LEVEL.search(text, text.find("\n", found.end()) + 1)
        if BACKWARD.search(text, found.end(), end.start() if end else len(text)) is not None:
            out.add(found.group(1))
    return frozenset(out)


def runs_code(tree: ast.Module) -> bool:
    """Whether a module does something when run, besides defining and importing: a script's
    `if __name__ == "__main__":`, its loops, its calls."""
    return any(isinstance(s, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)) or
               isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) for s in tree.body)


def worth_analysing(source: str) -> bool:
    """False when no rule can fire: no torch, or no sink."""
    return "torch" in source and has_sink(source)


@dataclass(frozen=True)
class FunctionSite:
    node: ast.AST
    owner: ast.ClassDef | None  # the class whose body defines it


def functions(tree: ast.Module) -> list[FunctionSite]:
    """Every function and method, found by walking statements only."""
    out: list[FunctionSite] = []
    stack: list = [(tree.body, None)]
    while stack:
        body, owner = stack.pop()
        for s in body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(FunctionSite(s, owner))
                stack.append((s.body, None))
            elif isinstance(s, ast.ClassDef):
                stack.append((s.body, s))
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    seq = getattr(s, field, None)
                    if isinstance(seq, list) and seq:
                        stack.append((seq, owner))
                if isinstance(s, ast.ExceptHandler) or hasattr(s, "pattern"):
                    stack.append((s.body, owner))
    out.sort(key=lambda f: f.node.lineno)
    return out


def text_of(lines: list[str], node: ast.AST) -> str:
    return "\n".join(lines[node.lineno - 1: getattr(node, "end_lineno", node.lineno)])


def function_has_sink(lines: list[str], node: ast.AST) -> bool:
    return has_sink(text_of(lines, node))


# Where a loop's second concrete iteration can matter: a backward (or a step before one) runs there.
STATEFUL = re.compile(BACKWARD.pattern + r"|\.step\s*\(")


class Statefulness:
    """Which lines run a backward or an optimizer step, directly or by calling (by name) a
    function that does: without one, what a loop's second iteration does fails no backward
    in it, and gains nothing from running its iterations one by one.  A few regex passes
    over the text (one per round of callers found)."""

    def __init__(self, source: str, sites: list[FunctionSite], imported: frozenset = frozenset()):
        """`imported`: names of functions of other modules that do (`from steps import train_step`)."""
        self.source = source
        self.starts = [0] + [m.end() for m in re.finditer(r"\n", source)]
        # substrings first (C speed; most library files have none), the regex on their lines only
        self.lines = sorted(self.lines_with(("backward", ".grad", ".step"), STATEFUL))
        names: set = set()
        new = {site.node.name for site in sites if self.touches(site.node)} | set(imported)
        while new:  # callers of stateful functions are stateful, by name
            names |= new
            calls = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(new))) + r")\s*\(")
            self.lines = sorted(set(self.lines) | self.lines_with(sorted(new), calls))
            new = {site.node.name for site in sites if site.node.name not in names and self.touches(site.node)}

    def lines_with(self, needles, pattern) -> set:
        """Numbers of the lines holding one of `needles` on which `pattern` matches."""
        out = set()
        for needle in needles:
            i = self.source.find(needle)
            while i >= 0:
                line = self.line_of(i)
                start, end = self.starts[line - 1], self.starts[line] if line < len(self.starts) else len(self.source)
                if pattern.search(self.source, start, end):
                    out.add(line)
                i = self.source.find(needle, end)
        return out

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos)

    def touches(self, node: ast.AST) -> bool:
        """Whether a stateful line lies within `node` (a loop or a function)."""
        i = bisect.bisect_left(self.lines, node.lineno)
        return i < len(self.lines) and self.lines[i] <= getattr(node, "end_lineno", node.lineno)
