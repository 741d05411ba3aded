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
import re
from dataclasses import dataclass

# A backward, an in-place op on a tensor, or a gradient read.
SINK = re.compile(r"\.backward\s*\(|autograd\s*\.\s*(?:grad|backward)\s*\(|manual_backward\s*\(|\.grad\b"
                  r"|\.step\s*\(|[A-Za-z0-9]_\s*\(|\]\s*[-+*/]?=[^=]|[-+*/]=")
# Something that can require grad: parameters, requires_grad, modules.
SOURCE = re.compile(r"requires_grad|Parameter\s*\(|parameters\s*\(|\.weight\b|\.bias\b|\bnn\.|torch\.nn"
                    r"|Module\b|\bforward\s*\(")
BACKWARD = re.compile(r"\.backward\s*\(|autograd\s*\.\s*(?:grad|backward)\s*\(|manual_backward\s*\(|\.grad\b")


def module_like(source: str, methods) -> frozenset:
    """Receivers (`model`, `self.net`) on which the text calls a method only nn.Modules have."""
    names = "|".join(sorted(methods))
    return frozenset(m.group(1) for m in re.finditer(r"([A-Za-z_][\w.]*)\s*\.\s*(?:" + names + r")\s*\(", source))


def worth_analysing(source: str) -> bool:
    """False when no rule can fire: no torch, or no sink, or nothing that requires grad."""
    return "torch" in source and SINK.search(source) is not None and (
        SOURCE.search(source) is not None or BACKWARD.search(source) is not None)


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


def has_sink(lines: list[str], node: ast.AST) -> bool:
    text = "\n".join(lines[node.lineno - 1: getattr(node, "end_lineno", node.lineno)])
    return SINK.search(text) is not None
