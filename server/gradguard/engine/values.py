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

from gradguard.engine.limits import charge

# Tri-state facts: True, False, or None for "unknown" (both possible).
Tri = Optional[bool]

# The instance part of an id made while a loop is past its concrete iterations: the id then
# stands for every later evaluation of its node at once (a summary), so no must fact rests on it.
SUMMARY = "*"

# Kinds of must facts in `Tensor.sure`, as (kind, region id) pairs.
CARRIES, FREED, DIRTY = "c", "f", "d"


def is_summary(ident: tuple) -> bool:
    return ident[-1] == SUMMARY


def sole_storage(objs: frozenset) -> frozenset:
    """The one runtime storage a tensor with these storage ids surely is, as a set (empty when
    it may be several): its only id, or an `nn.Parameter`'s own id beside the module parameter
    sets it belongs to (`("params", module)`, which stand for all of a module's parameters)."""
    if len(objs) == 1:
        return objs
    own = [o for o in objs if o[0] != "params"]
    return frozenset(own) if len(own) == 1 and own[0][0] == "param" else frozenset()


def tri_join(a: Tri, b: Tri) -> Tri:
    return a if a == b else None


def _tri_join_all(values: Iterable[Tri]) -> Tri:
    it = iter(values)
    first = next(it)
    return first if all(v == first for v in it) else None


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
    inference: object = None  # surely an inference tensor: the `inference_mode` block (or function) it was made in
    # storages of the tensors requiring grad its graph may reach (what `autograd.grad` can
    # differentiate it by), None when not known (an unknown call may have used anything)
    deps: Optional[frozenset] = None
    shape: Optional[tuple] = None  # its sizes, when the program states them (see engine/shapes.py)
    dtype: Optional[str] = None  # "float32", "float64", ... when surely that
    # which tensor object it is, when made here (a factory's result, a view): what setting its
    # requires_grad changes for every name of it; None when not known
    ident: Optional[tuple] = None
    batch: bool = False  # a DataLoader's batch: made when a loop reads it, in the mode there (see `batch_read`)
    device: Optional[str] = None  # "cpu" or "cuda" when surely there (a factory's, a conversion's)
    # surely not exactly one element though its shape is not known: an operand's was (broadcasting
    # never turns a size other than 1 into 1, a reshape keeps the count)
    several: bool = False

    def sure_regions(self, kind: str) -> frozenset:
        return frozenset(r for k, r in self.sure if k == kind)


@dataclass(frozen=True)
class Const:
    """A literal the engine folds: None, a bool, a str, an int or a float."""

    value: object


@dataclass(frozen=True)
class Span:
    """A slice whose bounds are known (`x[:, 2:5]`, `x[..., :-1]`), held in a `Const`: None where
    a bound is not written."""

    lower: Optional[int] = None
    upper: Optional[int] = None
    step: Optional[int] = None


@dataclass(frozen=True)
class Token:
    """The value of `id(x)` for one object made here, held in a `Const`: equal only to
    itself (a cache keyed by it is hit by the same object), and no number to compute with."""

    ident: tuple


@dataclass(frozen=True)
class Array:
    """A numpy array: no graph, its shape and dtype where the code states them (see
    engine/arrays.py)."""

    shape: Optional[tuple] = None
    dtype: Optional[str] = None
    # surely an ndarray, not a numpy scalar (what `t.numpy()` gives, whatever its shape): a tensor
    # that requires grad in arithmetic with it is converted by numpy (`p - w` raises)
    ndarray: bool = False
    unit: bool = False  # a uniform draw: every value in [0, 1) (`np.random.rand(1) < p` with p >= 1 holds)


@dataclass(frozen=True)
class Num:
    """Some Python number (kind matters for picking op overloads).  `size`: a tensor's size
    along a dimension (`x.shape[0]`, `len(x)`), taken to be at least 1, as a loop over a
    tensor is taken to run: `for t in range(x.shape[0]):` runs."""

    size: bool = False


@dataclass(frozen=True)
class Ref:
    """A dotted name of an imported module or library object (`torch.nn.functional.relu`)."""

    dotted: str


@dataclass(frozen=True)
class Obj:
    """An instance with attributes in the heap: `kind` is "module", "instance", "optimizer",
    "list", "dict", "generator", "class", "grad_ctx", "scaler" or "argparser"."""

    id: tuple
    kind: str


@dataclass(frozen=True)
class Tup:
    items: tuple  # tuple of values
    names: tuple = ()  # a named tuple's field names (`x.max(1).values`)


@dataclass(frozen=True)
class Func:
    node: object  # ast.FunctionDef / AsyncFunctionDef / Lambda
    owner: Optional[Obj] = None  # class object the function was looked up on
    bound: Optional[frozenset] = None  # `self` value for bound methods
    kind: str = "function"  # "function" | "staticmethod" | "classmethod" | "property" | "cached_property"
    closure: tuple = ()  # (name, value) of the enclosing function's locals it reads (a decorator's `fn`)
    # the grad mode it runs in when a mode wrapped it, `torch.no_grad()(fn)` (a project's decorator
    # returning that): False, True, or "keep" (the caller's); `inference`: `torch.inference_mode()(fn)`
    mode: object = "keep"
    inference: bool = False


@dataclass(frozen=True)
class Partial:
    """`functools.partial(func, *args, **kwargs)`: a call of `func` with these first."""

    func: frozenset
    args: tuple  # of values
    kwargs: tuple  # of (name, value)


@dataclass(frozen=True)
class Managed:
    """A call of a `@contextlib.contextmanager` function, run when a `with` enters it."""

    func: Func
    args: tuple  # of values
    kwargs: tuple  # of (name, value)


@dataclass(frozen=True)
class Method:
    """A method of a non-local receiver (tensor, module, optimizer, list, ...)."""

    recv: frozenset
    name: str


@dataclass(frozen=True)
class NamedTupleType:
    """A class made by `collections.namedtuple("State", ["v", "i"])`: calling it gives a
    `Tup` with these field names; the last fields may be left out, for their `defaults`
    (values, the last field's last; UNKNOWN for one not known)."""

    fields: tuple
    defaults: tuple = ()

    def with_defaults(self, given) -> "NamedTupleType":
        """The class with these defaults (values, the last field's last); None: not known one
        by one, so any field may have one."""
        if given is None:
            return NamedTupleType(self.fields, tuple(UNKNOWN for _ in self.fields))
        return NamedTupleType(self.fields, tuple(given)[-len(self.fields):])


@dataclass(frozen=True)
class Super:
    """`super()` inside a method of a local class."""

    self_value: frozenset
    class_id: tuple


@dataclass(frozen=True)
class GradMode:
    """A grad-mode context: `torch.no_grad()` (False), `torch.enable_grad()` (True), or one
    that leaves the mode alone (`autocast`), `mode="keep"`.  `inference`: `torch.inference_mode()`,
    inside which not even `enable_grad()` records a graph."""

    mode: object
    inference: bool = False
    leaves_inference: bool = False  # `torch.inference_mode(False)`: grad on, and out of inference mode
    autocast: bool = False  # `torch.autocast(...)` not surely disabled: some ops save cast copies of their inputs


@dataclass(frozen=True)
class Unknown:
    """Any value.  `dropped` marks what a value that grew too large (`normalize`) stands for:
    1, the atoms dropped from it other than objects and tensors; 2, its objects too.  A join
    with it drops those atoms of the other side as well, so that joins do not depend on the
    order they are made in (a set's iteration order, which follows memory addresses)."""

    dropped: int = 0


@dataclass(frozen=True)
class SomeSlice(Unknown):
    """A slice object whose bounds are not known (`slice(start, start + size)`): any value, but
    one that indexes as a slice does (a view), as `x[a:b]` written out would."""


UNKNOWN = frozenset({Unknown()})
NONE_ATOM = Const(None)
NONE = frozenset({NONE_ATOM})
EMPTY: frozenset = frozenset()
# On an object given to a call the engine did not follow (a limit): attributes not seen may exist.
UNSEEN_ATTRS = "<unseen attributes>"
PATCHED = ("<library attributes set>",)  # heap entry: "torch.zeros" -> what the program set there
# A list's attribute: one tensor with the must facts of the tensors surely in it, kept when its
# items are no longer known one by one (appended in a loop), so that `torch.stack(xs)` after
# the loop still surely carries what its first iterations appended.  Only appending adds to it.
HELD = "<held>"
HELD_NOTHING = frozenset({Tensor()})  # no tensor surely held (a join with it keeps no must fact)


def const(v) -> frozenset:
    return frozenset({Const(v)})


def literal_of(v: frozenset, *types):
    """The literal a value surely is, when its type is exactly one of `types` (a bool is no
    int here), or None."""
    if len(v) == 1:
        (a,) = tuple(v)
        if isinstance(a, Const) and type(a.value) in types:
            return a.value
    return None


def int_of(v: frozenset) -> Optional[int]:
    """The int a value surely is (not a bool), or None."""
    return literal_of(v, int)


def item_key(v: frozenset):
    """The dict key a value surely is, when it is one string, int (not a bool) or `id()`
    token, or a tuple of strings and ints (`cache[(h, w)]`), else None."""
    (a,) = tuple(v) if len(v) == 1 else (None,)
    if isinstance(a, Tup) and a.items and not a.names:
        parts = tuple(literal_of(i, str, int) for i in a.items)
        return parts if None not in parts else None
    return literal_of(v, str, int, Token)


def key_value(key) -> frozenset:
    """The value a known dict key is (see `item_key`): a tuple key is a tuple of its parts."""
    return frozenset({Tup(tuple(const(k) for k in key))}) if isinstance(key, tuple) else const(key)


def item_attr(key) -> str:
    """The heap attribute holding a dict's item under a known key: `[name` for a string,
    `]3` for an int, `]@...` for an `id()` token, `](...)` for a tuple, so that "3", 3, a
    token and a tuple stay different keys."""
    if isinstance(key, tuple):
        return "](" + repr(key)
    return ("[" if isinstance(key, str) else "]" if isinstance(key, int) else "]@") + str(key)


def is_item_attr(name: str) -> bool:
    """Whether a heap attribute holds a dict's item (see `item_attr`)."""
    return name[:1] in ("[", "]")


def tensor_of(v: frozenset) -> Optional[Tensor]:
    for a in v:
        if isinstance(a, Tensor):
            return a
    return None


def objs_of(v: frozenset, kind: Optional[str] = None) -> list:
    return [a for a in v if isinstance(a, Obj) and (kind is None or a.kind == kind)]


def is_sequence(v: frozenset) -> bool:
    """Whether `v` may be a list or a tuple (the operands of `cat`, an LSTM's `(h, c)`)."""
    return any(isinstance(a, Tup) or isinstance(a, Obj) and a.kind == "list" for a in v)


def join_tensors(ts: list) -> Tensor:
    """The one tensor atom standing for any of the distinct `ts`: may facts united, must facts
    intersected, in one pass (folding pairs would copy the growing sets once per tensor: a
    literal of 30,000 tensors took minutes)."""
    if len(ts) == 1:
        return ts[0]
    regions = frozenset().union(*(t.regions for t in ts))
    objs = frozenset().union(*(t.objs for t in ts))
    charge(len(ts) * (len(regions) + len(objs)))  # an upper bound of the items gone through
    return Tensor(regions, frozenset().union(*(t.freed for t in ts)), frozenset().union(*(t.dirty for t in ts)),
                  _tri_join_all(t.rg for t in ts), _tri_join_all(t.leaf for t in ts), objs,
                  all(t.retains_grad for t in ts), all(t.view_of_leaf for t in ts),
                  frozenset().union(*(t.cut for t in ts)), frozenset.intersection(*(t.sure for t in ts)),
                  _tri_join_all(t.inference for t in ts),
                  None if any(t.deps is None for t in ts) else frozenset().union(*(t.deps for t in ts)),
                  _tri_join_all(t.shape for t in ts), _tri_join_all(t.dtype for t in ts),
                  _tri_join_all(t.ident for t in ts), device=_tri_join_all(t.device for t in ts),
                  several=all(surely_several(t) for t in ts))


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
    """The distinct atoms `v` as a value: one tensor atom, one tuple per length (merged item by item)."""
    tensors, tuples, rest = [], {}, set()
    for x in v:
        if isinstance(x, Tensor):
            tensors.append(x)
        elif isinstance(x, Tup):
            tuples.setdefault(len(x.items), []).append(x)
        else:
            rest.add(x)
    if tensors:
        t = join_tensors(tensors)
        if t.sure and (tuples or any(x != NONE_ATOM for x in rest)):
            # Another alternative (a number: `max(0, beta + ...)`, an object, something unknown)
            # has none of these facts; None does not count: an op on it would have raised.
            t = replace(t, sure=frozenset())
        rest.add(t)
    for same in tuples.values():
        names = same[0].names if all(t.names == same[0].names for t in same) else ()  # a named tuple's fields
        rest.add(same[0] if len(same) == 1 else Tup(tuple(join_all(items) for items in zip(*(t.items for t in same))),
                                                     names))
    out = frozenset(rest)
    dropped = max((x.dropped for x in out if isinstance(x, Unknown)), default=0)
    if dropped or len(out) > MAX_ATOMS or _depth(out) > MAX_TUPLE_DEPTH:
        objs = [x for x in out if isinstance(x, Obj)]
        # the objects it may be, unless they are too many to follow (then joins would grow without end)
        dropped = 2 if dropped == 2 or len(objs) > MAX_OBJS else 1
        keep = [replace(x, sure=frozenset()) for x in out if isinstance(x, Tensor)]
        out = frozenset(keep + (objs if dropped == 1 else [])) | {Unknown(dropped)}
    return out


def join_all(values: Iterable[frozenset]) -> frozenset:
    """`join` of any number of values: folded pair by pair, or past `MAX_FOLDED` values (a
    literal of thousands of tensors), normalized at once from all their atoms, a summary as
    coarse as the fold and linear in them (the fold's widening and its growing sets are not)."""
    values = [v for v in values if v]
    if len(values) > MAX_FOLDED:
        charge(len(values))
        return normalize(frozenset().union(*values))
    out: frozenset = EMPTY
    for v in values:
        out = join(out, v)
    return out


def surely_several(t: Tensor) -> bool:
    """Whether a tensor surely does not have exactly one element (0 elements is not one either):
    one of its sizes is known and is not 1, or an op kept that from an operand (`several`)."""
    return t.several or t.shape is not None and any(d is not None and d != 1 for d in t.shape)


def graph_unknown(t: Tensor) -> Tensor:
    """`t` after code not seen may have detached it in place: no graph known, no fact resting on one."""
    if not t.regions:
        return t
    return replace(t, regions=frozenset(), freed=frozenset(), dirty=frozenset(), sure=frozenset(), rg=t.rg and None,
                   leaf=None, deps=None)


def _map_pairs(pairs: tuple, fn) -> tuple:
    """`map_tensors` over the values of (name, value) pairs; `pairs` itself when nothing changes."""
    out = tuple((k, map_tensors(v, fn)) for k, v in pairs)
    return pairs if all(x[1] is y[1] for x, y in zip(out, pairs)) else out


MAX_FOLDED = 1000  # more than any list of layers in real code (168 in timm's models)


def map_tensors(v: frozenset, fn) -> frozenset:
    """Apply `fn` to every tensor atom, also inside tuples and inside what a function value holds
    (a closure's captured locals, a `partial`'s arguments: a closure reads its variables when it
    runs, so a graph freed after it was defined is freed for it too).  Used to mark freed/dirty
    regions.  Returns `v` itself when nothing changes (the common case, checked without allocating)."""
    for a in v:
        if isinstance(a, Tensor):
            if fn(a) is not a:
                break
        elif isinstance(a, (Tup, Partial)) or isinstance(a, Func) and a.closure:
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
            b = a if all(x is y for x, y in zip(items, a.items)) else Tup(items, a.names)
        elif isinstance(a, Func) and a.closure:
            closure = _map_pairs(a.closure, fn)
            b = a if closure is a.closure else replace(a, closure=closure)
        elif isinstance(a, Partial):
            args = tuple(map_tensors(x, fn) for x in a.args)
            kwargs = _map_pairs(a.kwargs, fn)
            b = a if kwargs is a.kwargs and all(x is y for x, y in zip(args, a.args)) else \
                Partial(map_tensors(a.func, fn), args, kwargs)
        else:
            b = a
        changed |= b is not a
        out.append(b)
    return frozenset(out) if changed else v


# Methods of str that compute a value from their arguments alone: folded on known strings
# (`if not name.startswith("head."): p.requires_grad = False` over `named_parameters()`).
STR_METHODS = frozenset({
    "startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "replace", "split", "rsplit", "find",
    "rfind", "count", "isdigit", "isalpha", "isnumeric", "removeprefix", "removesuffix", "partition", "rpartition",
    "format", "capitalize", "title", "casefold", "zfill", "join",
})


MAX_TEXT = 4096  # characters of a string folded (`"x".replace("", ...)` grows)


def str_method(text: str, name: str, args) -> frozenset:
    """`text.name(*args)` when the arguments are known strings, numbers or tuples of strings."""
    values = [_str_argument(v) for v in args]
    if any(v is None for v in values) or name not in STR_METHODS:
        return UNKNOWN
    try:
        out = getattr(text, name)(*values)
    except (TypeError, ValueError, LookupError):  # `"{name}".format()`: a KeyError
        return UNKNOWN
    if isinstance(out, (list, tuple)):
        return frozenset({Tup(tuple(const(x) for x in out))}) if sum(map(len, out)) <= MAX_TEXT else UNKNOWN
    return const(out) if not isinstance(out, str) or len(out) <= MAX_TEXT else UNKNOWN


def _str_argument(v: frozenset):
    """A str method's argument when known: a string, a number, or a tuple of strings
    (`name.startswith(("head.", "fc."))`); None otherwise."""
    (a,) = tuple(v) if len(v) == 1 else (None,)
    if isinstance(a, Tup):
        parts = tuple(literal_of(x, str) for x in a.items)
        return None if None in parts else parts
    return literal_of(v, str, int)
