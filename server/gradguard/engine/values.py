"""Abstract values: what the flow engine knows about each Python value.

A value is a frozenset of atoms (one of several things at run time).  The atom that
matters is `Tensor`: which autograd graph regions it carries and, per region, whether an
earlier backward may have freed it or an in-place op may have modified a tensor that
region saved.  Freed/dirty flags live in the value, not in a global set, so a path on
which the graph was freed and a path on which it was not stay apart after a join
(`losses` rebuilt every iteration is not confused with the `loss` freed last iteration).

Every fact comes twice: as a *may* fact (`regions`, `freed`, `dirty`: it holds on some
path; joins take the union) and as a *must* fact (`sure`: it holds on every path that
reaches here with this value a tensor; joins take the intersection).  Only must facts
predict an error; may facts feed the advisory rules, fixes and hover.

Ids of regions and storages are `(context, site, sub, instance)`: the AST node that made
them under the call string that reached it, and which evaluation of that node (see
`SUMMARY`), so two calls of one helper, or two iterations of one loop, make different
regions and different storages.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Optional

# Tri-state facts: True, False, or None for "unknown" (both possible).
Tri = Optional[bool]

# The instance part of an id made while a loop is past its concrete iterations: the id then
# stands for every later evaluation of its node at once (a summary), so no must fact rests on it.
SUMMARY = "*"

# Kinds of must facts in `Tensor.sure`, as (kind, region id) pairs.
CARRIES, FREED, DIRTY = "c", "f", "d"


def is_summary(ident: tuple) -> bool:
    return ident[-1] == SUMMARY


def tri_join(a: Tri, b: Tri) -> Tri:
    return a if a == b else None


@dataclass(frozen=True)
class Tensor:
    regions: frozenset = frozenset()  # graph regions reachable from its grad_fn
    freed: frozenset = frozenset()  # regions an earlier backward may have freed
    dirty: frozenset = frozenset()  # regions whose saved tensors may have been modified in place
    rg: Tri = False  # requires_grad
    leaf: Tri = True  # no grad_fn
    objs: frozenset = frozenset()  # storage identities (views share them) for version tracking
    retains_grad: bool = False
    view_of_leaf: bool = False  # a view of a leaf that requires grad (in place on it raises too)
    cut: frozenset = frozenset()  # for a value without grad: the nodes that cut its graph (detach, no_grad, ...)
    sure: frozenset = frozenset()  # must facts: (CARRIES | FREED | DIRTY, region id)

    def sure_regions(self, kind: str) -> frozenset:
        return frozenset(r for k, r in self.sure if k == kind)


@dataclass(frozen=True)
class Const:
    """A literal the engine folds: None, a bool, a str or an int."""

    value: object


@dataclass(frozen=True)
class Num:
    """Some Python number (kind matters for picking op overloads)."""


@dataclass(frozen=True)
class Ref:
    """A dotted name of an imported module or library object (`torch.nn.functional.relu`)."""

    dotted: str


@dataclass(frozen=True)
class Obj:
    """An instance with attributes in the heap: `kind` is "module", "instance", "optimizer",
    "list", "dict", "generator", "class", "grad_ctx" or "scaler"."""

    id: tuple
    kind: str


@dataclass(frozen=True)
class Tup:
    items: tuple  # tuple of values


@dataclass(frozen=True)
class Func:
    node: object  # ast.FunctionDef / AsyncFunctionDef / Lambda
    owner: Optional[Obj] = None  # class object the function was looked up on
    bound: Optional[frozenset] = None  # `self` value for bound methods
    kind: str = "function"  # "function" | "staticmethod" | "classmethod" | "property"


@dataclass(frozen=True)
class Method:
    """A method of a non-local receiver (tensor, module, optimizer, list, ...)."""

    recv: frozenset
    name: str


@dataclass(frozen=True)
class Super:
    """`super()` inside a method of a local class."""

    self_value: frozenset
    class_id: tuple


@dataclass(frozen=True)
class GradMode:
    """A grad-mode context: `torch.no_grad()` (False), `torch.enable_grad()` (True), or one
    that leaves the mode alone (`autocast`), `mode="keep"`."""

    mode: object


@dataclass(frozen=True)
class Unknown:
    pass


UNKNOWN = frozenset({Unknown()})
NONE = frozenset({Const(None)})
EMPTY: frozenset = frozenset()


def const(v) -> frozenset:
    return frozenset({Const(v)})


def int_of(v: frozenset) -> Optional[int]:
    """The int a value surely is (not a bool), or None."""
    if len(v) == 1:
        (a,) = tuple(v)
        if isinstance(a, Const) and type(a.value) is int:
            return a.value
    return None


def tensor_of(v: frozenset) -> Optional[Tensor]:
    for a in v:
        if isinstance(a, Tensor):
            return a
    return None


def objs_of(v: frozenset, kind: Optional[str] = None) -> list:
    return [a for a in v if isinstance(a, Obj) and (kind is None or a.kind == kind)]


def join_tensors(a: Tensor, b: Tensor) -> Tensor:
    if a == b:
        return a
    return Tensor(a.regions | b.regions, a.freed | b.freed, a.dirty | b.dirty, tri_join(a.rg, b.rg),
                  tri_join(a.leaf, b.leaf), a.objs | b.objs, a.retains_grad and b.retains_grad,
                  a.view_of_leaf and b.view_of_leaf, a.cut | b.cut, a.sure & b.sure)


MAX_ATOMS = 12
MAX_OBJS = 32  # objects a value may be before it is just unknown
MAX_TUPLE_DEPTH = 3


def _depth(v: frozenset) -> int:
    d = 0
    for a in v:
        if isinstance(a, Tup):
            d = max(d, 1 + max((_depth(i) for i in a.items), default=0))
    return d


def join(a: frozenset, b: frozenset) -> frozenset:
    """Least upper bound: union of atoms, one tensor atom, tuples of equal length merged."""
    if a is b or a == b:
        return a
    if not a:
        return b
    if not b:
        return a
    return normalize(a | b)


def normalize(v: Iterable) -> frozenset:
    tensors, tuples, rest = [], {}, set()
    for x in v:
        if isinstance(x, Tensor):
            tensors.append(x)
        elif isinstance(x, Tup):
            n = len(x.items)
            if n in tuples:
                tuples[n] = Tup(tuple(join(p, q) for p, q in zip(tuples[n].items, x.items)))
            else:
                tuples[n] = x
        else:
            rest.add(x)
    if tensors:
        t = tensors[0]
        for u in tensors[1:]:
            t = join_tensors(t, u)
        if t.sure and any(isinstance(x, Unknown) for x in rest):
            t = replace(t, sure=frozenset())  # the unknown alternative may be a tensor without these facts
        rest.add(t)
    for t in tuples.values():
        rest.add(t)
    out = frozenset(rest)
    if len(out) > MAX_ATOMS or _depth(out) > MAX_TUPLE_DEPTH:
        objs = [x for x in out if isinstance(x, Obj)]
        keep = [replace(x, sure=frozenset()) for x in out if isinstance(x, Tensor)]
        # the objects it may be, unless they are too many to follow (then joins would grow without end)
        out = frozenset(keep + (objs if len(objs) <= MAX_OBJS else [])) | UNKNOWN
    return out


def join_all(values: Iterable[frozenset]) -> frozenset:
    out: frozenset = EMPTY
    for v in values:
        out = join(out, v)
    return out


def map_tensors(v: frozenset, fn) -> frozenset:
    """Apply `fn` to every tensor atom, also inside tuples (used to mark freed/dirty regions).
    Returns `v` itself when nothing changes (the common case, checked without allocating)."""
    for a in v:
        if isinstance(a, Tensor):
            if fn(a) is not a:
                break
        elif isinstance(a, Tup):
            break
    else:
        return v
    changed = False
    out = []
    for a in v:
        if isinstance(a, Tensor):
            b = fn(a)
        elif isinstance(a, Tup):
            items = tuple(map_tensors(i, fn) for i in a.items)
            b = a if all(x is y for x, y in zip(items, a.items)) else Tup(items)
        else:
            b = a
        changed |= b is not a
        out.append(b)
    return frozenset(out) if changed else v
