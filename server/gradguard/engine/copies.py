"""`copy.deepcopy`: new objects and new leaf tensors of the same structure.

Research code copies a model for an EMA teacher, a target network or a frozen reference
(`teacher = copy.deepcopy(student)`), and copies parameter lists for EMA weights
(`ema_params = copy.deepcopy(list(model.parameters()))`).  A copy has its own storage, and
each copied tensor is a new leaf that requires grad as the original did: updating one in
place outside no_grad raises, and changing it never bumps the original's version.

The copy is built the way `copy.deepcopy` builds it: a memo keeps shared objects shared
and cycles finite.  Only leaves can be deep-copied (torch raises for a tensor with a
grad_fn), and what the engine does not know how to copy (an optimizer, an object past
`DEPTH` levels) is unknown.
"""
from __future__ import annotations

from gradguard.engine.values import EMPTY, UNKNOWN, Obj, Tensor, Tup, join

COPYABLE = frozenset({"list", "dict", "module", "instance"})
DEPTH = 6


class DeepCopies:
    def deep_copy(self, v, st, node):
        """`copy.deepcopy(v)`."""
        self.cx.sure_events += 1
        return self._copy_value(v, st, ("copy",) + self.region_id(node, "copy"), {}, 0)

    def _copy_value(self, v, st, key, memo, depth):
        out = EMPTY
        for a in v:
            if isinstance(a, Tensor):
                if a.leaf is not True or a.view_of_leaf:  # torch refuses, or the engine cannot tell
                    return UNKNOWN
                out = join(out, frozenset({Tensor(rg=a.rg, leaf=True, objs=frozenset(key + (o,) for o in a.objs),
                                                  cut=a.cut)}))
            elif isinstance(a, Tup):
                items = tuple(self._copy_value(i, st, key, memo, depth + 1) for i in a.items)
                out = join(out, frozenset({Tup(items, a.names)}))
            elif isinstance(a, Obj) and a.kind in COPYABLE and depth < DEPTH:
                out = join(out, frozenset({self._copy_object(a, st, key, memo, depth)}))
            elif isinstance(a, Obj):
                return UNKNOWN
            else:  # numbers, strings, functions, classes: shared, as deepcopy shares what is immutable
                out = join(out, frozenset({a}))
        return out if out else UNKNOWN

    def _copy_object(self, a: Obj, st, key, memo, depth) -> Obj:
        if a.id in memo:
            return memo[a.id]
        new = memo[a.id] = Obj(key + (a.id,), a.kind)  # a cycle back to `a` finds the copy here
        for table in (self.cx.obj_class, self.cx.module_kind, self.cx.frozen_by):
            if a.id in table:
                table[new.id] = table[a.id]
        st.heap[new.id] = {name: self._copy_value(v, st, key, memo, depth + 1)
                           for name, v in (st.heap.get(a.id) or {}).items()}
        return new
