"""The abstract state at a program point, its join, and the two graph-wide updates.

`env` holds a frame's local names; module globals live in the heap under `GLOBALS` so
that an inlined function reads the module's names as they are at the call.  Heap
entries are dicts treated as immutable: a write replaces the object's dict, so copying a
state is two shallow dict copies.
"""
from __future__ import annotations

from dataclasses import replace

from gradguard.engine.limits import VALUE_ITEMS, charge
from gradguard.engine.values import (
    CARRIES, DIRTY, FREED, UNSEEN_ATTRS, Const, Obj, Tensor, Tup, const, graph_unknown, is_summary, join, map_tensors,
    tensor_of, tri_join,
)

GLOBALS = ("<module>",)


ESCAPED = ("<escaped>",)  # in `statics`: the sites of lists and dicts stored in the heap (see `escape`)


class State:
    """`statics` holds class objects' attributes, shared by every state of one analysis:
    class bodies are bound once, and keeping them out of the heap keeps joins cheap.  It
    also holds the sites whose lists and dicts escaped (`ESCAPED`)."""

    __slots__ = ("env", "heap", "grad", "statics", "weak")

    def __init__(self, env: dict, heap: dict, grad, statics: dict, weak: bool = False):
        self.env = env
        self.heap = heap
        self.grad = grad  # grad mode: True (enabled), False (no_grad), None (unknown)
        self.statics = statics
        # a path taken only where data is empty (`if idx.numel() == 0: continue`): it adds may
        # facts to the joins it reaches, as a loop's later iterations do (see `join_states`)
        self.weak = weak

    def copy(self) -> "State":
        return State(dict(self.env), dict(self.heap), self.grad, self.statics, self.weak)

    def __eq__(self, other):
        return (isinstance(other, State) and self.grad == other.grad and self.env == other.env
                and self.heap == other.heap)

    __hash__ = None

    def escape(self, value) -> None:
        """A list or dict stored in an object, another container or a global outlives the
        call that made it: the next one made at its site is another object (see
        `container_id`).  One that stays in a function's locals is made again in place."""
        for a in value:
            if isinstance(a, Obj) and a.kind in ("list", "dict"):
                self.statics.setdefault(ESCAPED, set()).add(a.id[:4])

    def get_attr(self, obj_id, name):
        attrs = (self.statics if obj_id[0] == "class" else self.heap).get(obj_id)
        return None if attrs is None else attrs.get(name)

    def set_attr(self, obj_id, name, value, strong=True):
        self.escape(value)
        if obj_id[0] == "class":
            self.statics.setdefault(obj_id, {})[name] = value
            return
        attrs = self.heap.get(obj_id, {})
        new = dict(attrs)
        if not strong and name in attrs:
            value = join(attrs[name], value)
        elif name[:1] != "<" and (strong and MAYBE_ABSENT in attrs or not strong and attrs):
            # set on every path (off the list), or on one of several objects: perhaps not on this one
            maybe = maybe_absent(attrs)
            new[MAYBE_ABSENT] = const(maybe - {name} if strong else maybe | {name})
        new[name] = value
        self.heap[obj_id] = new

    def surely_has(self, obj_id, name):
        """Whether `obj_id` has attribute `name` (`hasattr`), as far as its heap entry tells: True
        when set on every path, False when set on none, None when set on some."""
        attrs = self.heap.get(obj_id)
        if attrs is None or UNSEEN_ATTRS in attrs:
            return None
        return None if name in maybe_absent(attrs) else name in attrs


# On an object's heap entry: the names of the attributes set on some paths only (one constant).
MAYBE_ABSENT = "<maybe absent>"

# On a module's heap entry: the parameters whose flag was set one by one (`lin.weight.requires_grad
# = False`), each name with its flag, as one constant; none until then.
RG_BY_NAME = "<rg by name>"
NO_FLAGS = const(frozenset())

# Heap attributes whose absence means a value: a module's `<rg>` is True until frozen, so a
# module frozen on one path only is possibly trainable after the join (absent elsewhere, an
# attribute is one never set, and the other path's value stands).
ABSENT_MEANS = {"<rg>": const(True), RG_BY_NAME: NO_FLAGS}


def _join_dicts(a: dict, b: dict, heap: bool = False) -> dict:
    """The join of two environments, or of two heap entries of one object (`heap`): there, an
    attribute set on one side only may be absent after it (`MAYBE_ABSENT`)."""
    if a is b:
        return a
    charge(len(a) + len(b))
    out = dict(a)
    for k, v in b.items():
        w = out.get(k, ABSENT_MEANS.get(k))
        out[k] = v if w is None else join(w, v)
    for k, default in ABSENT_MEANS.items():
        if k in a and k not in b:
            out[k] = join(a[k], default)
    if heap:
        one_sided = frozenset(k for k in a.keys() ^ b.keys() if k[:1] != "<")
        if one_sided or MAYBE_ABSENT in a or MAYBE_ABSENT in b:
            out[MAYBE_ABSENT] = const(one_sided | maybe_absent(a) | maybe_absent(b))
    return out


def maybe_absent(attrs: dict) -> frozenset:
    """The names of the attributes of a heap entry set on some paths only."""
    v = attrs.get(MAYBE_ABSENT)
    return next(iter(v)).value if v else frozenset()


def join_states(a: State | None, b: State | None) -> State | None:
    if a is None:
        return b
    if b is None:
        return a
    if a.heap is b.heap:
        heap = a.heap
    else:
        charge(len(a.heap) + len(b.heap))
        heap = dict(a.heap)
        for k, attrs in b.heap.items():
            mine = heap.get(k)
            if mine is not attrs:
                heap[k] = attrs if mine is None else _join_dicts(mine, attrs, heap=True)
    env = _join_dicts(a.env, b.env)
    if a.env.get(MAYBE_UNBOUND) != b.env.get(MAYBE_UNBOUND) or a.env.keys() != b.env.keys():
        # a local bound on one side only may be unbound after the join
        unbound = a.env.keys() ^ b.env.keys() | maybe_unbound(a) | maybe_unbound(b)
        env[MAYBE_UNBOUND] = const(frozenset(unbound - {MAYBE_UNBOUND}))
    out = State(env, heap, tri_join(a.grad, b.grad), a.statics, a.weak and b.weak)
    return adopt_sure(out, b if a.weak else a) if a.weak != b.weak else out


MAYBE_UNBOUND = "<maybe unbound>"  # in a frame's env: the locals bound on some paths only
YIELDED = "<yielded>"  # in a generator's env: bound once it has yielded (surely, when bound on every path)


def maybe_unbound(st: State) -> frozenset:
    v = st.env.get(MAYBE_UNBOUND)
    if not v:
        return frozenset()
    if len(v) == 1:  # as join_states leaves it
        return next(iter(v)).value
    return frozenset().union(*(a.value for a in v if isinstance(a, Const)))


def surely_bound(st: State, name: str):
    """Whether a local is bound here on every path (True), on none (False), or on some (None)."""
    if name not in st.env:
        return False
    return None if name in maybe_unbound(st) else True


def _rewrite(st: State, fn) -> None:
    """Apply `fn` to every tensor atom held in the state (the env and the heap)."""
    charge(VALUE_ITEMS * len(st.env) + len(st.heap))
    for k, v in st.env.items():
        w = map_tensors(v, fn)
        if w is not v:
            st.env[k] = w
    for oid, attrs in st.heap.items():
        charge(VALUE_ITEMS * len(attrs))
        new = None
        for name, v in attrs.items():
            w = map_tensors(v, fn)
            if w is not v:
                if new is None:
                    new = dict(attrs)  # heap entries are never written in place
                new[name] = w
        if new is not None:
            st.heap[oid] = new


def mark_grad_gained(st: State, storage: tuple, new: Tensor, definite: bool) -> None:
    """An in-place op made the tensor with this one `storage` require grad (`state.add_(h)`):
    every other value of that storage (the caller's variable a function's parameter stood for,
    a view) does too, and carries the op's graph.  A value that may be another storage too
    may now require grad; so may every value of it when the op may have been on another tensor
    (not `definite`)."""
    strong = definite and not is_summary(storage)
    carried = frozenset(f for f in new.sure if f[0] == CARRIES)

    def fn(t: Tensor):
        if storage not in t.objs or t.rg is True:
            return t
        charge(len(t.regions) + len(new.regions))
        if strong and t.objs == {storage}:
            return replace(t, regions=t.regions | new.regions, rg=new.rg, leaf=False if new.rg is True else None,
                           sure=t.sure | carried)
        return replace(t, regions=t.regions | new.regions, rg=None, leaf=None if t.leaf is not False else False)

    _rewrite(st, fn)


def mark_flag_set(st: State, old: Tensor, rg: bool) -> None:
    """`x.requires_grad = True` (or `requires_grad_()`) on a leaf changed the tensor object,
    not one name of it: the caller's variable a parameter stood for, an attribute holding
    it, see the new flag too (a view of it made before is another object, and does not)."""
    if old.leaf is not True or not old.objs:
        return
    if old.ident is None or is_summary(old.ident):
        # which object it is is not known: another name of its storage may be it (`coeffs =
        # [a.to(dev), ...]`, then `for p in coeffs: p.requires_grad = True`), its flag no longer known
        _rewrite(st, lambda t: replace(t, rg=None) if t.rg is not None and t.rg != rg and t.leaf is True
                 and t.objs & old.objs and (t.ident is None or is_summary(t.ident)) else t)
        return
    _rewrite(st, lambda t: replace(t, rg=rg, leaf=True) if t.ident == old.ident and t.rg != rg else t)


def mark_reshaped(st: State, old: Tensor, shape) -> None:
    """`x.unsqueeze_(0)` changed the shape of the tensor object, not of one name of it: every name
    of that object has the new shape (a view made before is another object and keeps its own);
    another name of its storage that may be the object has a shape no longer known."""
    if not old.objs:
        return
    known = old.ident is not None and not is_summary(old.ident)
    _rewrite(st, lambda t: t if not t.objs & old.objs or t.shape is None
             else replace(t, shape=shape) if known and t.ident == old.ident
             else replace(t, shape=None, several=False) if t.ident is None or is_summary(t.ident) or not known
             else t)


def mark_detached(st: State, old: Tensor | None) -> None:
    """`t.detach_()` cut the graph of the tensor object itself, not of one name of it: the
    attribute a module's `buffers()` yielded it from has no graph now either.  Another name of
    its storage may be that object or a view made before (which keeps its graph): what it
    carries is no longer known; so for every tensor when which one `t` is is not known (None)."""
    if old is not None and not old.objs:
        return
    exact = old is not None and old.ident is not None and not is_summary(old.ident)

    def fn(t: Tensor):
        if old is not None and not t.objs & old.objs or not t.regions and t.rg is not True:
            return t
        if exact and t.ident == old.ident:
            return replace(t, regions=frozenset(), freed=frozenset(), dirty=frozenset(), rg=False, leaf=True,
                           sure=frozenset(), deps=frozenset())
        return graph_unknown(t)
    _rewrite(st, fn)


def _mark(st: State, regions: frozenset, flag: str, sure: frozenset) -> None:
    """Add `regions` to the `flag` set ("freed" or "dirty") of every value that carries them,
    and the must fact to every value that surely carries one of the `sure` regions."""
    if not regions:
        return
    kind = FREED if flag == "freed" else DIRTY
    carried = frozenset((CARRIES, r) for r in sure)

    def fn(t: Tensor):
        charge(len(t.regions) + len(t.sure))
        hit = t.regions & regions
        marked = getattr(t, flag)
        new_sure = frozenset((kind, r) for c, r in t.sure & carried) if carried and t.sure else frozenset()
        if (not hit or hit <= marked) and new_sure <= t.sure:
            return t
        return replace(t, **{flag: marked | hit}, sure=t.sure | new_sure)

    _rewrite(st, fn)


def mark_freed(st: State, regions: frozenset, sure: frozenset = frozenset()) -> None:
    """Backward without retain_graph released the saved tensors of `regions` (of `sure`, on
    every path).  The locals of the callers of the running function are in the heap too."""
    _mark(st, regions, "freed", sure)


def mark_dirty(st: State, regions: frozenset, sure: frozenset = frozenset()) -> None:
    """An in-place op changed a tensor that `regions` saved for backward (`sure`: that very
    storage, after the save, on every path)."""
    _mark(st, regions, "dirty", sure)


def _sure_from(v: frozenset, c) -> frozenset:
    """`v` with the must facts of `c` (the same value on fewer paths) instead of its own."""
    if v is c or not any(isinstance(a, (Tensor, Tup)) for a in v):
        return v

    def fn(t: Tensor):
        ct = tensor_of(c) if c else None
        sure = ct.sure if ct is not None else frozenset()
        return t if t.sure == sure else replace(t, sure=sure)
    out = []
    changed = False
    for a in v:
        b = a
        if isinstance(a, Tensor):
            b = fn(a)
        elif isinstance(a, Tup):
            twin = next((x for x in c or () if isinstance(x, Tup) and len(x.items) == len(a.items)), None)
            items = tuple(_sure_from(i, twin.items[k] if twin else None) for k, i in enumerate(a.items))
            b = a if all(x is y for x, y in zip(items, a.items)) else Tup(items, a.names)
        changed |= b is not a
        out.append(b)
    return frozenset(out) if changed else v


def adopt_sure(full: State, concrete: State | None) -> State:
    """`full` (the join over every path) with the must facts of `concrete` (its iterations run
    one by one): after a loop, what held after each of its first iterations is what we report,
    as a bounded unrolling does; its later iterations, summarised, add only may facts."""
    out = full.copy()
    src = concrete or State({}, {}, None, full.statics)
    for k, v in out.env.items():
        out.env[k] = _sure_from(v, src.env.get(k))
    for oid, attrs in full.heap.items():
        theirs = src.heap.get(oid, {})
        if theirs is not attrs:
            new = {name: _sure_from(v, theirs.get(name)) if isinstance(v, frozenset) else v
                   for name, v in attrs.items()}
            if any(new[name] is not v for name, v in attrs.items()):
                out.heap[oid] = new
    return out
