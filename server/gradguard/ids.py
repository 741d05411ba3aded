"""Stable ids of syntax-tree nodes: what the engine, the facts and the fixes key on.

`id()` of a node names it only in the process that parsed it, and only while that tree
lives; a copy (pickled to another process, parsed again after an edit) is another node.
A stable id names the place in the program instead, the way ty's `AstIds` do: the module's
path (empty for the file analysed, the path for a workspace module it imports), the qualified name of the scope the node is in (`Trainer.step`, `<lambda>`,
`fit.<listcomp>`; a second `def f` in one scope is `f@2`), and the node's index in that
scope's own visit order, which does not enter nested scopes.  So an edit inside one
function renumbers nothing outside it, and the same text parsed anywhere numbers alike.

`number(tree, module)` gives every node its id once, after parsing, as the attribute
`gid`; `gid(node)` reads it (as fast as `id(node)`), and `Index(tree)` finds a node by it.
A scope's node also keeps the name its own nodes were numbered under (`scope`): a tree put
together from statements of an earlier one (`reparse`) numbers again only the scopes whose
names changed and the nodes new to it.
"""
from __future__ import annotations

import ast
from operator import attrgetter

gid = attrgetter("gid")

_SCOPE_NAMES = {ast.Lambda: "<lambda>", ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>",
                ast.DictComp: "<dictcomp>", ast.GeneratorExp: "<genexpr>"}
_NAMED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SCOPES = (*_NAMED, *_SCOPE_NAMES)


def number(tree: ast.AST, module: str) -> ast.AST:
    """Give each node of `tree` (parsed from the file `module`) its stable id; `tree` back."""
    tree.gid = f"{module}:#0"
    todo = [(tree, "")]  # (a scope's node, its qualified name)
    while todo:
        scope, qual = todo.pop()
        prefix = f"{module}:{qual}#"
        seen: dict = {}  # names of the scopes nested here -> how many so far
        i = 0 if scope is not tree else 1
        stack = _children(scope)
        stack.reverse()
        while stack:
            node = stack.pop()
            node.gid = f"{prefix}{i}"
            i += 1
            if isinstance(node, _SCOPES):
                name = node.name if isinstance(node, _NAMED) else _SCOPE_NAMES[type(node)]
                count = seen[name] = seen.get(name, 0) + 1
                inner = (f"{qual}." if qual else "") + (name if count == 1 else f"{name}@{count}")
                if getattr(node, "scope", None) != f"{module}:{inner}":  # else numbered so already (`reparse`)
                    node.scope = f"{module}:{inner}"
                    todo.append((node, inner))
                continue
            more = _children(node)
            more.reverse()
            stack += more
    return tree


_SKIPPED = {"ctx", "op", "ops"}  # operators and load/store marks: shared singletons, not places
# ...named by their class, so that a walk over every node of a tree (a fix's) can ask any its id
for _kind in (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop):
    for _cls in _kind.__subclasses__():
        _cls.gid = f"<{_cls.__name__}>"
_FIELDS: dict = {}  # node class -> the fields that may hold nodes


def _children(node: ast.AST) -> list:
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = _FIELDS[type(node)] = tuple(f for f in node._fields if f not in _SKIPPED)
    out = []
    for field in fields:
        value = getattr(node, field, None)
        if type(value) is list:
            out += [v for v in value if isinstance(v, ast.AST)]
        elif isinstance(value, ast.AST):
            out.append(value)
    return out


def derived(node: ast.AST, made: ast.AST, part: str) -> ast.AST:
    """`made`, a node the engine builds from `node` (one level of a `with a, b:`), with an id of
    its own derived from `node`'s: `part` tells it from the others made from `node`."""
    made.gid = f"{node.gid}/{part}"
    return made


def module_of(node_id: str) -> str:
    """The module a stable id is in (the path given to `number`)."""
    return node_id.rpartition(":")[0]


class Index:
    """The nodes of numbered trees by their stable ids: where an id sent by another process
    (hover's facts, a fix's target) is in this process's parse of the same text."""

    def __init__(self, *trees: ast.AST):
        self._nodes = {node.gid: node for tree in trees for node in ast.walk(tree)}

    def __getitem__(self, node_id: str) -> ast.AST:
        return self._nodes[node_id]
