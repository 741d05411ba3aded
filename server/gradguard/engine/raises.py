"""Ops that raise because of the tensor they are given, decided where they run.

Each check asks one must fact of the value in hand and records a `facts.Raise` when it
holds on this path: `.numpy()` (or `np.asarray(t)`) on a tensor that surely requires grad
while grad mode is surely on; an optimizer given a tensor that is surely not a leaf;
`requires_grad` changed on a surely non-leaf tensor; an inference tensor saved for backward
or changed in place outside inference mode; an input `autograd.grad` is asked for that the
outputs do not reach; a backward of a tensor of several elements without a gradient.  A tensor is surely a non-leaf only
when it surely requires grad too: an op on inputs that do not require grad gives a leaf.
"""
from __future__ import annotations

import ast

from gradguard import knowledge as K
from gradguard.engine.values import CARRIES, EMPTY, Const, Obj, Tensor, const, item_attr, surely_several
from gradguard.facts import Raise
from gradguard.ids import gid


def sure_tensor(v: frozenset) -> Tensor | None:
    """The tensor `v` surely is (one alternative, a tensor), or None."""
    if len(v) == 1:
        (a,) = tuple(v)
        if isinstance(a, Tensor):
            return a
    return None


def requires_grad(t: Tensor | None) -> bool:
    return t is not None and t.rg is True


def non_leaf(t: Tensor | None) -> bool:
    """Surely has a grad_fn (and so requires grad): `leaf` alone is False for any op result."""
    return t is not None and t.rg is True and t.leaf is False


def unoptimizable(t: Tensor | None) -> bool:
    """A non-leaf an optimizer refuses: one that retains its grad (`retain_grad()`) it takes."""
    return non_leaf(t) and not t.retains_grad


# The errors `note_raise` records, each where the op that raises runs: the path ends there, so
# an error further on is hidden until a fix removes this one (see verify.py).
RAISED_KINDS = frozenset({"numpy_requires_grad", "nonscalar_backward", "nonleaf_optimizer", "requires_grad_nonleaf",
                          "inference_tensor", "grad_unused"})


class RaiseChecks:
    """Mixed into the interpreter (it reads `facts`, `key`, the call stack and the heap)."""

    def note_raise(self, kind: str, node: ast.AST, target, t: Tensor | None, origin: tuple | None = None,
                   in_place: bool = False, from_loss: bool = False, member: bool = False) -> None:
        """`node` raises `kind` on this path, the value `t` (surely a tensor) showing why.
        A raise seen on one real path stays (an earlier iteration raised already); a function
        analysed without a caller says nothing (its arguments are not known), nor a method
        call on one alternative of a receiver that may be something else."""
        if t is None or self.cx.caller_unknown or self.cx.one_of_several:
            return
        if origin is None:
            regs = self.cx.facts.regions
            made = sorted((regs[r] for r in t.sure_regions(CARRIES) if r in regs), key=lambda r: r.order)
            origin = (made[-1].node,) if made else ()
        self.cx.facts.raises.setdefault(self.key(node), Raise(kind, node, target, origin, self.current_function(),
                                                             self.entry_call(), in_place, from_loss, member))
        self.frame.raised_at = self.frame.statement  # nothing after it runs on this path

    # ----------------------------------------------------------------- numpy
    def to_numpy(self, node, target, v, kwargs, st, sequence: bool = False) -> None:
        """`t.numpy()`, or a numpy function converting `t` (`np.asarray(t)`, `np.array([a, b])`):
        torch refuses a tensor that requires grad while grad mode is on (`force=True` detaches)."""
        force = kwargs.get(K.TO_NUMPY.force_keyword)
        if force is not None and self.truth_of(force) is not False or st.grad is not True:
            return
        t = sure_tensor(v)
        if t is None and sequence:
            t, target = self.sure_element(v, st), None
        if requires_grad(t):
            self.note_raise("numpy_requires_grad", node, target, t)

    def sure_element(self, v, st) -> Tensor | None:
        """A tensor that requires grad surely among the elements of the list or tuple `v`."""
        items = self.exact_items(v, st)
        if items is not None:
            return next((t for item in items if requires_grad(t := sure_tensor(item))), None)
        t = self.each_element(v, st)
        return t if requires_grad(t) else None

    def each_element(self, v, st) -> Tensor | None:
        """The tensor standing for every element of `v`, a list that surely has one, when every
        element is surely a tensor (its facts then hold of the first one, whatever it is)."""
        (a,) = tuple(v) if len(v) == 1 else (None,)
        if isinstance(a, Obj) and a.kind == "list" and st.get_attr(a.id, "<nonempty>") == const(True):
            return sure_tensor(st.get_attr(a.id, "<elems>") or frozenset())
        return None

    # ----------------------------------------------------------------- optimizers
    def optimizer_params_leaf(self, params, kwargs, st, node, param_node) -> None:
        """An optimizer (or `add_param_group`) given a tensor that is surely not a leaf raises
        "can't optimize a non-leaf Tensor", unless it is made `differentiable`."""
        flag = kwargs.get(K.OPTIMIZER_NONLEAF_KEYWORD)
        if flag is not None and self.truth_of(flag) is not False:
            return
        found = self.nonleaf_param(params, param_node, st)
        if found is not None:
            target, t, member = found
            self.note_raise("nonleaf_optimizer", node, target, t, member=member and target is not None)

    def nonleaf_param(self, v, node, st, depth: int = 0):
        """(expression, tensor, whether the expression holds the tensor rather than is it) of a
        tensor surely among the parameters `v` (a list, a tuple, a param-group dict, or such a
        sequence of dicts) that is surely not a leaf, or None."""
        if depth > 3 or len(v) != 1:
            return None
        (a,) = tuple(v)
        if isinstance(a, Obj) and a.kind == "dict":
            params = st.get_attr(a.id, item_attr("params"))
            inner = _dict_value(node, "params")
            t = sure_tensor(params) if params is not None else None
            if t is not None:  # a group's params may be one tensor (`{"params": model.alpha}`)
                return (inner if inner is not None else node, t, inner is None) if unoptimizable(t) else None
            return self.nonleaf_param(params, inner, st, depth + 1) if params is not None else None
        items = self.exact_items(v, st)
        if items is None:
            t = self.each_element(v, st)
            member = sure_tensor(self.nonleaf_member(v, st))
            return (node, t, True) if unoptimizable(t) else self.member_node(member, node) if member is not None else None
        nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == len(items) else \
            [None] * len(items)
        for item, item_node in zip(items, nodes):
            t = sure_tensor(item)
            if unoptimizable(t):
                return (item_node, t, False) if item_node is not None else self.member_node(t, node)
            found = self.nonleaf_param(item, item_node, st, depth + 1)
            if found is not None:
                return found
        return None

    def member_node(self, t: Tensor, holder) -> tuple:
        """(expression, tensor, whether the expression only holds it) for a tensor found in a
        sequence: where the program wrote it, else the sequence's expression."""
        written = self.cx.member_nodes.get(t)
        return (written, t, False) if written is not None else (holder, t, True)

    # ----------------------------------------------------------------- requires_grad
    def set_requires_grad(self, node, target, t: Tensor | None, flag, setter: bool, member: bool = False) -> None:
        """`t.requires_grad = flag` raises on a non-leaf whatever the flag; `t.requires_grad_(flag)`
        only when it would turn grad off (a non-leaf already requires grad).  `member`: `target`
        holds the tensor (a module whose parameter it is)."""
        if non_leaf(t) and (setter or flag is False):
            self.note_raise("requires_grad_nonleaf", node, target, t, member=member)

    # ----------------------------------------------------------------- inference tensors
    def inference_site(self):
        """The `inference_mode` block or function running now, None outside inference mode."""
        return self.cx.inference_sites[-1] if self.cx.inference_sites else None

    def saved_inference(self, node, info, bound, arg_nodes) -> None:
        """An op recorded for backward saves an inference tensor (`x * w` saves `x` for `w`'s
        gradient): "Inference tensors cannot be saved for backward".  Saved only for an input
        that surely requires grad."""
        if self.inference_site() is not None:
            return
        for inp, names in info.saves.items():
            given = bound.get(inp)
            if given is None or not requires_grad(sure_tensor(given)):
                continue
            for name in names:
                saved = bound.get(name)
                t = sure_tensor(saved) if saved is not None and not name.startswith("result") else None
                if t is not None and t.inference is not None:
                    target = next((n for n, v in arg_nodes if v is saved and n is not None), None)
                    self.note_raise("inference_tensor", node, target, t, origin=(t.inference,))
                    return

    def inplace_inference(self, node, target, v) -> None:
        """An in-place change of an inference tensor outside inference mode raises, whatever
        the grad mode: "Inplace update to inference tensor outside InferenceMode"."""
        t = sure_tensor(v)
        if t is not None and t.inference is not None and self.inference_site() is None:
            self.note_raise("inference_tensor", node, target, t, origin=(t.inference,), in_place=True)

    # ----------------------------------------------------------------- autograd.grad
    def unused_inputs(self, outs, inputs, inputs_node, kwargs, st, node) -> None:
        """`torch.autograd.grad(outputs, inputs)` raises "The differentiated Tensor at index i
        appears to not have been used in the graph" for an input that requires grad and that
        the outputs' graph surely does not reach (every op on the way is known), unless
        `allow_unused` or `materialize_grads` is set."""
        if inputs is None or any(k in kwargs and self.truth_of(kwargs[k]) is not False
                                 for k in K.AUTOGRAD_GRAD_UNUSED_KEYWORDS):
            return
        t = sure_tensor(outs)
        if not requires_grad(t) or t.deps is None:
            return
        reached = t.deps | t.objs
        items = [inputs] if sure_tensor(inputs) is not None else self.exact_items(inputs, st)
        if items is not None:
            nodes = inputs_node.elts if isinstance(inputs_node, (ast.List, ast.Tuple)) and \
                len(inputs_node.elts) == len(items) else [inputs_node] * len(items)
            for i, (item, item_node) in enumerate(zip(items, nodes)):
                x = sure_tensor(item)
                if not requires_grad(x) or not x.objs:
                    return  # another error first, or a tensor not known
                if not x.objs & reached or self.viewed_here(x, item_node):
                    # none of the tensors it may be (the join of a loop's batches); or a view made
                    # in the call itself (`grad(e, x[a:b])`), which no graph built before can use.
                    # `origin`: the cuts of a graph that reached it (a `.detach()` that may be why)
                    cuts = tuple(c for c, reach in self.cx.facts.cut_reach.items() if reach & x.objs)
                    self.note_raise("grad_unused", node, item_node, x, origin=cuts,
                                    member=item_node is inputs_node and sure_tensor(inputs) is None)
                    return
            return
        elems = sure_tensor(self.iter_elements(inputs, st))
        if elems is None or elems.rg is not True:
            return  # an element that does not require grad raises another error first
        if self.contained(inputs, st) - reached:
            self.note_raise("grad_unused", node, inputs_node, t, origin=(), member=inputs_node is not None)

    def viewed_here(self, t: Tensor, node) -> bool:
        """Whether `t` is the view of a tensor that the expression `node` (`x[a:b]`) makes."""
        return isinstance(node, ast.Subscript) and t.ident is not None and len(t.ident) > 3 and \
            t.ident[0] == "view" and t.ident[1:4] == self.site_key(node, "view")

    # ----------------------------------------------------------------- what a list surely holds
    CONTAINS = "<contains>"
    NONLEAF = "<nonleaf>"

    def contains(self, v, storages: frozenset, st, nonleaf: frozenset = EMPTY) -> None:
        """Record on the list `v` the storages of tensors requiring grad it surely holds
        (`list(head.parameters()) + [scale]`: head's weights and `scale`), which its exact
        items may not show one by one; and `nonleaf`, a tensor it surely holds that is not a
        leaf (`scale` made by `.to(torch.float64)`), which no optimizer takes."""
        for a in v:
            if isinstance(a, Obj) and a.kind == "list":  # set even when empty: a join with it keeps nothing
                st.set_attr(a.id, self.CONTAINS, const(storages))
                st.set_attr(a.id, self.NONLEAF, nonleaf)

    def nonleaf_member(self, v, st, node=None) -> frozenset:
        """A tensor surely among the elements of `v` (written `node`) that is surely not a leaf, as
        a value, or EMPTY; `member_nodes` keeps the expression that put it there."""
        if len(v) != 1:
            return EMPTY
        items = self.exact_items(v, st) or ()
        nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == len(items) else ()
        for i, item in enumerate(items):
            t = sure_tensor(item)
            if unoptimizable(t):
                if nodes:
                    self.cx.member_nodes.setdefault(t, nodes[i])
                return item
        (a,) = tuple(v)
        known = st.get_attr(a.id, self.NONLEAF) if isinstance(a, Obj) and a.kind == "list" else None
        return known if known is not None and unoptimizable(sure_tensor(known)) else EMPTY

    def contained(self, v, st) -> frozenset:
        """The storages of tensors requiring grad surely among the elements of `v`."""
        if len(v) != 1:
            return frozenset()
        (a,) = tuple(v)
        items = self.exact_items(v, st)
        sure = frozenset(o for item in items or () if requires_grad(x := sure_tensor(item)) and len(x.objs) == 1
                         for o in x.objs)
        if isinstance(a, Obj) and a.kind == "list":
            known = st.get_attr(a.id, self.CONTAINS)
            if known is not None and len(known) == 1 and isinstance(c := next(iter(known)), Const):
                sure |= c.value
        return sure

    def surely_given(self, v, st) -> frozenset:
        """The storages of the tensors requiring grad `v` surely is or holds."""
        t = sure_tensor(v)
        return t.objs if requires_grad(t) and len(t.objs) == 1 else self.contained(v, st)

    def trainable_layers(self, m: Obj, st) -> list:
        """The torch.nn layers under `m` whose parameters surely require grad."""
        return [x for x in self.submodules(m, st) if (info := self.builtin_info(x)) is not None and info.has_params
                and self.module_rg(x, st) is True]

    # ----------------------------------------------------------------- backward of a non-scalar
    def implicit_gradient(self, node, target, outputs, st) -> None:
        """`y.backward()` (or `autograd.grad(y, x)`) without a gradient for `y`: torch makes
        one only for a single element, "grad can be implicitly created only for scalar
        outputs" otherwise.  `outputs`: the tensor, or a list or tuple of them."""
        items = [outputs] if sure_tensor(outputs) is not None else self.exact_items(outputs, st) or ()
        for item in items:
            t = sure_tensor(item)
            if requires_grad(t) and surely_several(t):
                regions = self.cx.facts.regions
                from_loss = any(gid(regions[r].node) in self.cx.facts.unreduced for r in t.regions if r in regions)
                self.note_raise("nonscalar_backward", node, target, t, from_loss=from_loss)
                return


def _dict_value(node, key: str):
    """The expression under `key` in a dict display `node` (`{"params": [w], "lr": 0.1}`)."""
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if isinstance(k, ast.Constant) and k.value == key:
                return v
    return None
