"""Which fixes apply to a finding, derived from the facts (the server turns them into edits).

Kinds: "detach" (append `.detach()` to each span's expression), "detach_before" (insert
`NAME = NAME.detach()` before the statement at the span), "detach_after" (insert it after
that statement), "no_grad" (wrap the statements at the span in `with torch.no_grad():`),
"retain_graph" (add `retain_graph=True` to the call at the span), "item" (append `.item()`),
"clone" (append `.clone()`), "retain_grad" (insert `NAME.retain_grad()` after the statement
at the span), "zero_grad" (insert `NAME.zero_grad()` before the statement at the span),
"move_into_loop" (move the statement at the span to the top of the loop body).
"""
from __future__ import annotations

import ast

from gradguard.facts import Facts
from gradguard.findings import Fix


def statement_of(facts: Facts, node: ast.AST) -> ast.stmt:
    while not isinstance(node, ast.stmt):
        node = facts.parents[node]
    return node


def fix(facts: Facts, kind: str, title: str, nodes, name: str = "", preferred: bool = False) -> Fix:
    return Fix(kind, title, tuple(facts.span(n) for n in nodes), name, preferred)


def prefer(fixes: list[Fix], index: int = 0) -> tuple[Fix, ...]:
    """Mark one fix preferred (the first by default) and return them in order."""
    from dataclasses import replace
    return tuple(replace(f, preferred=i == index) for i, f in enumerate(fixes))


def loop_carried_names(loop: ast.AST) -> set:
    """Names an iteration may read before assigning them: values from the previous iteration."""
    assigned = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        assigned -= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    definite: set = set()
    exposed: set = set()
    for stmt in loop.body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in definite:
                exposed.add(n.id)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                definite |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return exposed & assigned


def assigned_before(facts: Facts, name: str, loop: ast.AST) -> bool:
    """`name` is assigned somewhere before the loop in the same body (so it exists at loop entry)."""
    parent = facts.parents.get(loop)
    body = None
    for field in ("body", "orelse", "finalbody"):
        seq = getattr(parent, field, None)
        if isinstance(seq, list) and loop in seq:
            body = seq[: seq.index(loop)]
    if body is None:
        return False
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for stmt in body for n in ast.walk(stmt))
