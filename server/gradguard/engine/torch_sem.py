"""Torch semantics for the flow engine: ops, modules, optimizers, grad mode and backward.

What each op saves for backward, which ops are views, in-place or non-differentiable,
and what the nn modules compute comes from `gradguard.knowledge` (data distilled from
torch's derivatives.yaml); this mixin applies it to abstract values:

* an op whose result requires grad creates a graph *region*; the region records which
  storages it saved, so an in-place op on one of them (or `optimizer.step()` on a
  parameter) marks the region dirty in every value that carries it;
* `backward()` without `retain_graph` marks every region of its root freed in every
  value that carries it; a later backward whose root carries a freed region that saved
  tensors will raise, and so will one through a dirty region.
"""
from __future__ import annotations

import ast
import math
from dataclasses import replace

from gradguard import knowledge as K
from gradguard.engine.arguments import ArgumentParsers
from gradguard.engine.arrays import (
    Arrays, array_method, array_of, call_numpy, fill_dtype, from_numbers, joined, tensor_from_array,
)
from gradguard.engine.copies import DeepCopies
from gradguard.engine.datasets import Datasets
from gradguard.engine.hooks import REGISTER, ModuleHooks
from gradguard.engine.raises import RaiseChecks, sure_tensor
from gradguard.engine.shapes import FLOATING, INDEXING, SIZE, Shapes, grid, numel, pieces, several
from gradguard.engine.shapes import of as shape_of
from gradguard.engine.state import (
    GLOBALS, NO_FLAGS, RG_BY_NAME, mark_detached, mark_dirty, mark_flag_set, mark_freed, mark_grad_gained,
    mark_reshaped,
)
from gradguard.engine.values import (
    CARRIES, DIRTY, EMPTY, FREED, HELD, HELD_NOTHING, MAX_FOLDED, NONE, PATCHED, SUMMARY, UNKNOWN, UNSEEN_ATTRS,
    Array, Const, Func, GradMode, Method, NamedTupleType, Num, Obj, Partial, Ref, Span, Super, Tensor, Token, Tup,
    Unknown, const, int_of, is_item_attr, is_sequence, is_summary, item_attr, item_key, join, join_all, key_value,
    SomeSlice, literal_of, map_tensors, objs_of, sole_storage, str_method, tensor_of,
)
from gradguard.facts import Accumulation, Backward, GradRead, Inplace, Region, Step
from gradguard.ids import gid, number

GRADS = "<grads>"  # on an optimizer (and the module): whether .grad may be set, so step() changes parameters
# On the module globals: the storages of the leaves whose .grad is surely set, one Const per alternative
# (a join keeps both; what every alternative has is sure).  step() surely changes only those.
SURE_GRADS = "<sure grads>"
# Conversions that copy when they change the dtype or device, and are the identity otherwise;
# they keep the value's graph and storage for this analysis (a dtype change adds a ToCopy node
# that saves nothing; integer casts are in NONDIFF_METHODS).
CONVERSIONS = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "type", "type_as"})
# Methods that return the tensor itself for this analysis (its graph and storage identity).
IDENTITY_METHODS = frozenset({"contiguous", "pin_memory", "share_memory_"})
# Config objects whose attributes are the keywords they are made with.
NAMESPACES = frozenset({"argparse.Namespace", "types.SimpleNamespace"})
# Base classes that give an object no attribute of a name this program chooses (`hasattr`).
PLAIN_BASES = frozenset({"builtins.object", "torch.nn.Module", "torch.nn.modules.module.Module"})
# On the dict `vars(obj)` returns: the object whose `__dict__` it is.
VARS_OF = "<vars of>"
THREAD_POOL = "<thread pool>"  # what `ThreadPoolExecutor(...)` is (see `in_new_thread`)
REPARAMETRIZED = "<reparametrized>"  # on a module: the attribute a parametrization computes on each read
MODULE_KEYS = "<module keys>"  # on a ModuleDict: its keys, in order, when each is known
MAX_EXACT_PARAMETERS = 8  # `parameters()` item by item up to this many (a small model's, a meta-learner's)
MAXLEN = "<maxlen>"  # on a list made by `collections.deque(maxlen=n)`: n, or unknown (see `bounded`)
SLOTS = "<parameter slots>"  # on a module: the names `m._parameters[name] = v` set (see `set_parameter_slot`)
BUILTIN_NAMES = frozenset({"len", "range", "enumerate", "zip", "list", "tuple", "sorted", "reversed", "set",
                           "iter", "next", "sum", "min", "max", "abs", "print", "isinstance", "super", "filter",
                           "map", "dict", "float", "int", "bool", "str", "getattr", "setattr", "hasattr", "type",
                           "locals", "globals", "id", "repr", "round", "open", "any", "all", "vars", "property",
                           "staticmethod", "classmethod", "slice", "eval"})


def device_given(args, kwargs) -> bool:
    """Whether a `.to(...)` call names a device (a string or a device object) besides a dtype,
    which may copy it whatever the dtype."""
    return "device" in kwargs or any(not any(isinstance(a, Ref) for a in v) for v in args)


def reached(inputs) -> frozenset | None:
    """What a result's graph may reach: its inputs that may require grad, and what theirs
    reach; None when an input is not known (it may have brought any graph)."""
    out = set()
    for v in inputs:
        for a in v:
            if isinstance(a, Tensor):
                if a.rg is False:
                    continue
                if a.deps is None:
                    return None
                out |= a.deps | a.objs
            elif not isinstance(a, (Const, Num)):
                return None
    return frozenset(out)


def _saved_arguments(cls: ast.ClassDef) -> list:
    """The positions, among `apply`'s arguments, of those a custom Function's `forward` passes
    to `ctx.save_for_backward` as they came (a parameter it never rebinds)."""
    forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if forward is None:
        return []
    params = [a.arg for a in forward.args.posonlyargs + forward.args.args][1:]  # after ctx
    rebound = {t.id for n in ast.walk(forward) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(t)
               if isinstance(t, ast.Name)}
    saved = [a.id for n in ast.walk(forward) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "save_for_backward" for a in n.args if isinstance(a, ast.Name)]
    return [params.index(name) for name in saved if name in params and name not in rebound]


def _requires_grad(v: frozenset) -> object:
    """Whether an operand requires grad: True, False, or None when it may be something unknown
    (a call into a library: it may return a tensor that requires grad)."""
    t = tensor_of(v)
    unknown = any(isinstance(a, Unknown) for a in v)
    if t is None:
        return None if unknown else False
    return t.rg if not unknown or t.rg is True else None


def _tri_or(values) -> object:
    values = list(values)
    if any(v is True for v in values):
        return True
    if all(v is False for v in values):
        return False
    return None


INDEX_TENSOR = frozenset({Tensor(rg=False, leaf=True, deps=frozenset(), dtype="int64")})


def _index_kind(index, written=None) -> str:
    """How `x[index]` indexes, for an index that is no tensor: "basic" (numbers, slices, None,
    `...`: a view), "advanced" (an ndarray or a list: a copy) or "either" (one not known, which
    may be an array: `batch["idx"]`, a numpy value that may be a scalar).  `written`, the index's
    syntax: a slice written out is one whatever its bounds (`x[:, :n]`), as is a `slice(a, b)`."""
    if isinstance(written, ast.Slice) or isinstance(written, ast.Constant) and not isinstance(written.value, bool):
        return "basic"
    kinds = set()
    for a in index:
        if isinstance(a, Tup):  # `x[:, idx]`: advanced if any part is
            elts = written.elts if isinstance(written, ast.Tuple) and len(written.elts) == len(a.items) and not any(
                isinstance(e, ast.Starred) for e in written.elts) else [None] * len(a.items)
            parts = {_index_kind(item, e) for item, e in zip(a.items, elts)} or {"basic"}
            kinds.add("advanced" if "advanced" in parts else "basic" if parts == {"basic"} else "either")
        elif isinstance(a, Array) and a.ndarray or isinstance(a, Obj) and a.kind == "list":
            kinds.add("advanced")
        elif isinstance(a, Tensor):  # inside a tuple (`G[:, parent[i]]`): a 0-d integer tensor indexes as a
            # number does; one of a dimension or more as an array (its shape not known: taken for a number)
            kinds.add("advanced" if a.shape or a.dtype == "bool" else "basic")
        elif isinstance(a, (Num, SomeSlice)) or isinstance(a, Const) and not isinstance(a.value, bool):
            kinds.add("basic")
        else:
            kinds.add("either")
    return kinds.pop() if len(kinds) == 1 else "either"


class TorchSemantics(ModuleHooks, DeepCopies, ArgumentParsers, RaiseChecks, Shapes, Arrays, Datasets):
    # ----------------------------------------------------------------- small helpers
    def builtin(self, name):
        return frozenset({Ref("builtins." + name)}) if name in BUILTIN_NAMES else UNKNOWN

    def grad_mode_of(self, v):
        """The grad mode a context manager or decorator value sets: True, False, None, or "keep"."""
        modes = set()
        for a in v:
            if isinstance(a, GradMode):
                modes.add(a.mode)
            elif isinstance(a, Ref) and a.dotted in K.NO_GRAD_CONTEXTS:  # `@torch.no_grad` without parentheses
                modes.add(False)
            elif isinstance(a, Ref) and a.dotted in K.ENABLE_GRAD_CONTEXTS:
                modes.add(True)
            else:
                return "keep"
        return modes.pop() if len(modes) == 1 else "keep"

    def enter_value(self, ctx):
        """What `with ctx as x` binds: None for a grad mode, the pool itself for a thread pool."""
        if ctx == frozenset({Ref(THREAD_POOL)}):
            return ctx
        return NONE if all(isinstance(a, GradMode) for a in ctx) and ctx else UNKNOWN

    def kind(self, v) -> str:
        if tensor_of(v) is not None:
            return "tensor"
        if v and all(isinstance(a, (Num, Const)) and not isinstance(getattr(a, "value", 0), str) for a in v):
            return "number"
        if any(isinstance(a, Unknown) for a in v):
            return "unknown"
        return "other"

    def site_key(self, node, sub=0) -> tuple:
        return (self.frame.ctx, gid(node) if node is not None else None, sub)

    def loop_count(self, it, st) -> tuple:
        """(how many times a `for` over `it` runs, or None; a function giving the element of a
        concrete iteration from its index, or None) for `range(...)` and `enumerate(...)`."""
        objs = objs_of(it, "list")
        if len(it) != 1 or len(objs) != 1:
            return None, None
        attrs = st.heap.get(objs[0].id) or {}
        count = int_of(attrs.get("<count>", UNKNOWN))
        kind = attrs.get("<counter>")
        if kind is None:
            return count, None
        (c,) = tuple(kind)
        form, start, step = c.value

        def counter(i, elem):
            n = const(start + i * step)
            if form == "range":
                return n
            return frozenset(Tup((n,) + a.items[1:]) if isinstance(a, Tup) and len(a.items) == 2 else a
                             for a in elem)
        return count, counter

    def region_id(self, node, sub=0) -> tuple:
        """A new id for this evaluation of `node`: numbered while every enclosing loop runs one
        of its concrete iterations, a summary of all later evaluations once a loop widens."""
        key = self.site_key(node, sub)
        if self.cx.widening:
            return key + (SUMMARY,)
        n = self.cx.instances.get(key, 0) + 1
        self.cx.instances[key] = n
        return key + (n,)

    def container_id(self, kind: str, node, ctx=None) -> tuple:
        """The id of a list or dict made at `node` (in `ctx`, if not the running frame's): the
        site's, unless one made there escaped (`State.escape`); then numbered as regions are,
        so that the list one call of a function made and the model kept (`self.state =
        new_state`) is not the one the next call makes; numbered too in a loop or comprehension
        run item by item (`for p in [w, v]: groups.append({"params": [p]})`: two dicts)."""
        site = (kind, self.frame.ctx if ctx is None else ctx, gid(node), kind)
        if site not in self.cx.escaped and not self.cx.unrolling:
            return site
        if self.cx.widening:
            return site + (SUMMARY,)
        n = self.cx.instances.get(site, 0) + 1
        self.cx.instances[site] = n
        return site + (n,)

    def fresh_tensor(self, node, st, rg=False, sub=0, inputs=()):
        """A new tensor.  For one computed from `inputs` without a graph (argmax, a comparison),
        the node is where a graph may have been cut."""
        rg = rg if st.grad is not False else False
        cut = self.cut_by(node, inputs, st) if rg is False else frozenset()
        storage = ("t",) + self.region_id(node, sub)
        return frozenset({Tensor(rg=rg, leaf=True, objs=frozenset({storage}), cut=cut,
                                 inference=self.inference_site(), deps=frozenset(), ident=storage)})

    def cut_by(self, node, inputs, st) -> frozenset:
        """Where the graph of a result without grad was cut: here, if an input may require grad
        (`site` is the no_grad block when grad mode is off), plus the inputs' own cuts."""
        cut = frozenset()
        live = False
        reached = set()  # what the graph cut here reached (`facts.cut_reach`)
        for v in inputs:
            t = tensor_of(v)
            if t is not None:
                cut |= t.cut
                live |= t.rg is not False
                if t.deps is not None:
                    reached |= t.deps | t.objs
        if live:
            site = self.cx.no_grad_sites[-1] if self.cx.no_grad_sites else self.cx.grad_off_call
            here = site if st.grad is False and site is not None else node
            cut |= {here}
            self.cx.facts.cut_reach.setdefault(here, set()).update(reached)
        return cut

    def region(self, rid, node, saved_names, saved_objs, saves, args, modules=(), certain=False,
               sure_saves=False, saved_sure=(), leaves=(), reaches=None) -> Region:
        reg = self.cx.facts.regions.get(rid)
        if reg is None:
            reg = Region(rid, node, loops=self.loops_here(), function=self.current_function(),
                         order=len(self.cx.facts.regions))
            self.cx.facts.regions[rid] = reg
        reg.saves |= saves
        reg.certain |= certain
        reg.saved_objs |= set(saved_objs)
        reg.saved_names |= set(saved_names)
        reg.modules |= set(modules)
        reg.sure_saves |= sure_saves
        reg.leaves |= set(leaves)
        reg.reaches = None if reaches is None or reg.reaches is None else reg.reaches | reaches
        for o, name in saved_sure:
            if not is_summary(o):
                reg.saved_sure.add(o)
                reg.saved_as.setdefault(o, set()).add(name)
        for o in saved_objs:
            self.cx.saved_index.setdefault(o, set()).add(rid)
        if args:
            reg.args = args
        return reg

    # ----------------------------------------------------------------- ops
    def apply_op(self, name, node, args, kwargs, st, method=True, arg_nodes=None, sub=0):
        """A torch op call: `args` are the positional arguments, the receiver first when
        `method` (`x.mul(y)`, `x * y`), as written otherwise (`torch.mm(a, b)`)."""
        rest = args[1:] if method else args
        if not method:
            kwargs = K.aten_keywords(name, kwargs)
        info = K.resolve(name, [self.kind(a) for a in rest], tuple(kwargs), method=method)
        nodes = list(arg_nodes) if arg_nodes else [None] * len(args)
        nodes += [None] * (len(args) - len(nodes))
        bound, bound_nodes = {}, {}
        if method:
            bound["self"], bound_nodes["self"] = args[0], nodes[0]
        parts = {}  # Tensor[] params (cat, stack, einsum operands): their elements, one by one when known
        positional = info.positional_params(method)
        for i, (p, v, n) in enumerate(zip(positional, rest, nodes[1:] if method else nodes)):
            if p in info.tensor_params and tensor_of(v) is not None and len(rest) > len(positional):
                parts[p] = tuple(rest[i:])  # `torch.einsum(eq, a, b)`: the operands as varargs
                bound[p] = self.all_of(parts[p])
                break
            bound[p], bound_nodes[p] = v, n
        for k, v in kwargs.items():
            p = info.param_for_keyword(k)
            if p is not None:
                bound[p] = v
        for p in info.tensor_params:
            v = bound.get(p)
            if v is not None and is_sequence(v):
                items = self.exact_items(v, st)
                bound[p] = self.every_element(v, st)
                if items:
                    parts[p] = items
        first = next((p for p in info.params if p in info.tensor_params and p in bound), None)
        self_val = bound.get("self", bound.get(first) if first else UNKNOWN)
        if info.inplace:
            others = [v for p, v in bound.items() if p != "self"]
            return self.inplace(node, bound_nodes.get("self"), self_val, others, st, info)
        inputs = [v for v in bound.values() if tensor_of(v) is not None or any(isinstance(a, Unknown) for a in v)]
        if not info.known and any(isinstance(a, Obj) for v in [*args, *kwargs.values()] for a in v):
            inputs.append(UNKNOWN)  # an unknown op given a module, list or dict may reach tensors inside it
        # a keyword the overload chosen has no parameter for (`torch.norm(a, dim=1)` taken for `norm.Scalar`): which
        # overload runs is not known, nor its shape
        shape = self.op_shape(info, bound, st) if all(info.param_for_keyword(k) is not None for k in kwargs) else None
        if info.name.split(".")[-1] in K.LOSS_SHAPES and shape != ():
            self.cx.facts.unreduced.add(gid(node))  # `F.mse_loss(x, y, reduction="none")`
        several = shape is None and self.keeps_several(info, bound)
        if not info.differentiable:
            return self.with_several(self.with_shape(self.fresh_tensor(node, st, rg=False, sub=sub, inputs=inputs),
                                                     shape), several)
        arg_list = [(bound_nodes.get(p), bound[p]) for p in info.params if p in bound]
        out = self.with_dtype(self.with_shape(self.op_result(node, info, bound, inputs, st, view=info.view,
                                                             base=self_val, sub=sub, arg_nodes=arg_list, parts=parts),
                                              shape), self.op_dtype(info, bound))
        out = self.with_several(self.with_device(out, info, bound), several)
        split = pieces(shape_of(self_val), info.name.split(".")[-1], bound) if info.name in ("split", "chunk") else None
        if split is not None and tensor_of(out) is not None:  # `q, k, v = x.split(d, -1)`: each piece's shape
            return frozenset({Tup(tuple(frozenset({replace(tensor_of(out), shape=s)}) for s in split))})
        if len(info.returns) > 1 and set(info.returns) == {"T"}:  # `values, indices = x.max(1)`
            return frozenset({Tup(tuple(out if i in info.differentiable_outputs else self.with_shape(
                self.fresh_tensor(node, st, rg=False, sub=(sub, i), inputs=inputs), shape)
                for i in range(len(info.returns))), info.fields)})
        return out

    def op_result(self, node, info, bound, inputs, st, view=False, base=None, sub=0, arg_nodes=(),
                  modules=(), extra_rg=False, parts=None):
        """The tensor an op returns, with the graph region it creates if it requires grad.
        `parts`: the known elements of a Tensor[] param, each surely saved if the param is."""
        rgs = [_requires_grad(v) if tensor_of(v) is not None else None for v in inputs]
        rg = _tri_or(rgs + ([extra_rg] if extra_rg is not False else []))
        if st.grad is False:
            rg = False
        elif st.grad is None and rg is True:
            rg = None
        bt = tensor_of(base) if base is not None else None
        rid = self.region_id(node, sub)
        objs = bt.objs if view and bt is not None else frozenset({("t",) + rid})
        view_leaf = bool(view and bt is not None and (bt.view_of_leaf or (bt.leaf is True and bt.rg is True)))
        # made in inference mode, or a view of a tensor that was: an inference tensor
        inference = self.inference_site() or (bt.inference if view and bt is not None else None)
        if rg is False:
            return frozenset({Tensor(rg=False, leaf=True, objs=objs, cut=self.cut_by(node, inputs, st),
                                     inference=inference, deps=frozenset(), ident=("t",) + rid)})
        regions, freed, dirty, sure = set(), set(), set(), set()
        for v in inputs:
            t = tensor_of(v)
            if t is not None and t.rg is not False:
                regions |= t.regions
                freed |= t.freed
                dirty |= t.dirty
                sure |= t.sure
        if rg is True and not is_summary(rid):
            sure.add((CARRIES, rid))
            self.cx.sure_events += 1
        if rg is True:
            self.saved_inference(node, info, bound, arg_nodes)
        saved_names, saved_objs, saves, sure_saves, saved_sure = set(), set(), False, False, []
        # under autocast, an op run in lower precision saves cast copies of its inputs: their storages are not
        # what it saved (it still saved tensors: freeing its graph matters)
        casts = self.cx.autocasts > 0 and info.name.split(".")[-1] in K.AUTOCAST_LOWER_PRECISION
        for inp, names in info.saves.items():
            v = bound.get(inp)
            t = tensor_of(v) if v is not None else None
            if v is None or (t is not None and t.rg is False) or (t is None and not extra_rg):
                continue
            for n in names:
                if n.startswith("result") and n[6:].isdigit() and int(n[6:]) not in info.differentiable_outputs:
                    continue  # `topk`, `max(dim)` save their indices: another tensor than the values returned here
                if n.startswith("result"):
                    saved_objs |= objs
                    saved_names.add("result")
                    saves = sure_saves = True
                    saved_sure.extend((o, "result") for o in objs if len(objs) == 1)
                    continue
                sv = bound.get(n)
                if sv is None:
                    continue
                st_t = tensor_of(sv)
                if st_t is not None:
                    saved_objs |= frozenset() if casts else st_t.objs
                    saved_names.add(n)
                    saves = True
                    for part in (parts or {}).get(n, (sv,)):
                        pt = tensor_of(part)
                        if len(part) == 1 and pt is not None:  # surely this tensor: saved, of this storage if one
                            sure_saves = True  # (a cast copy too: freeing it matters as much)
                            saved_sure.extend((o, n) for o in (() if casts else sole_storage(pt.objs)))
                elif self.kind(sv) == "number" and n in info.tensor_params:  # `x * 2` saves the 2, wrapped
                    saved_names.add(n)
                    saves = sure_saves = True
                elif any(isinstance(a, Unknown) for a in sv):
                    saved_names.add(n)
                    saves = True
        args = [(n, tensor_of(v).regions) for n, v in arg_nodes if n is not None and tensor_of(v) is not None]
        leaves = [o for v in inputs if len(v) == 1 and (t := tensor_of(v)) is not None and t.leaf is True
                  and t.rg is True for o in t.objs]
        # a list argument reaches what its items do: not the storage of an item without grad (`cat([x] + feats)`)
        whole = {id(bound[p]) for p in parts or {} if p in bound}
        deps = reached([v for v in inputs if id(v) not in whole] + [x for p in parts or {} for x in parts[p]])
        self.region(rid, node, saved_names, saved_objs, saves, args, modules, certain=rg is True,
                    sure_saves=sure_saves, saved_sure=saved_sure, leaves=leaves, reaches=deps)
        return frozenset({Tensor(frozenset(regions) | {rid}, frozenset(freed), frozenset(dirty), rg, False, objs,
                                 False, view_leaf, sure=frozenset(sure), deps=deps)})

    def every_element(self, v, st) -> frozenset:
        """All the elements of a sequence as the inputs of one op (`torch.stack(xs)`, `sum(xs)`):
        its items one by one when known; else any element, with the must facts of those the
        list surely holds."""
        items = self.exact_items(v, st)
        if items:
            return self.all_of(items)
        elems = self.iter_elements(v, st)
        t = tensor_of(elems)
        if t is None or len(elems) != 1 or len(v) != 1 or not objs_of(v, "list"):
            return elems
        held = tensor_of(st.get_attr(next(iter(v)).id, HELD) or HELD_NOTHING)
        return elems if held is None or held.sure <= t.sure else frozenset({replace(t, sure=t.sure | held.sure)})

    def all_of(self, values) -> frozenset:
        """Several tensors that are all inputs of one op (`torch.cat([x, temb])`): unlike a join
        (one of them), what each surely carries, the result surely carries."""
        tensors = [(tensor_of(v), v) for v in values if tensor_of(v) is not None]
        if not tensors:
            return join_all(values)
        ts = [t for t, _ in tensors]
        return frozenset({Tensor(  # sets united in one pass: `sum(xs)` of a literal of 30,000 tensors
            regions=frozenset().union(*(t.regions for t in ts)), freed=frozenset().union(*(t.freed for t in ts)),
            dirty=frozenset().union(*(t.dirty for t in ts)), rg=_tri_or(t.rg for t in ts), leaf=None,
            objs=frozenset().union(*(t.objs for t in ts)), cut=frozenset().union(*(t.cut for t in ts)),
            sure=frozenset().union(*(t.sure for t, v in tensors if not any(isinstance(a, Unknown) for a in v))),
            deps=None if any(t.deps is None for t in ts) else frozenset().union(*(t.deps for t in ts)))})

    def view_of(self, v, node, st):
        t = tensor_of(v)
        if t is None:
            return UNKNOWN
        view_leaf = t.view_of_leaf or (t.leaf is True and t.rg is True)
        return frozenset({replace(t, leaf=False if t.rg else t.leaf, view_of_leaf=view_leaf, shape=None,
                                  several=False, ident=("view",) + self.region_id(node, "view"))})

    def index_tensor(self, base, index, st, node):
        if tensor_of(index) is not None:
            out = self.apply_op("__getitem__", node, [base, index], {}, st, arg_nodes=[node.value, node.slice])
            return self.with_shape(out, self.gathered_shape(tensor_of(base), index)) if len(out) == 1 else out
        kind = _index_kind(index, getattr(node, "slice", None))
        if kind != "advanced":
            t = tensor_of(base)
            view = self.with_shape(self.view_of(base, node, st), self.indexed_shape(t, index) if t is not None else None)
            if kind == "basic":
                return view
        # an array or a list indexes as torch converts it, a tensor of indices: a copy, not a view
        copy = self.apply_op("__getitem__", node, [base, INDEX_TENSOR], {}, st, arg_nodes=[node.value, node.slice])
        return copy if kind == "advanced" else join(view, copy)

    @staticmethod
    def gathered_shape(t: Tensor | None, index) -> tuple | None:
        """`x[idx]` by one 1-D tensor: a row of `x` per index (`x[perm[i:i + bs]]`), or per true
        element of a mask (how many, not known): the rows' own sizes follow."""
        i = tensor_of(index)
        if t is None or not t.shape or i is None or len(index) != 1 or i.shape is None or len(i.shape) != 1:
            return None
        return (i.shape[0] if i.dtype in INDEXING else None,) + tuple(t.shape[1:])

    # ----------------------------------------------------------------- in-place
    def inplace(self, node, target_node, target_val, others, st, op, definite=True):
        """An in-place op on `target_val`: a leaf check, a version bump, and the target now
        carries the op's graph.  `op` is the in-place op's OpInfo or its name; `definite`
        is False when the target may also be something other than this tensor."""
        t = tensor_of(target_val)
        if t is None:
            return target_val
        definite = definite and len(target_val) == 1
        if definite:
            self.inplace_inference(node, target_node, target_val)
        leaf = t.leaf is True and t.rg is True
        key = self.key(node)
        if definite and (leaf or t.view_of_leaf) and st.grad is True and not self.cx.caller_unknown:
            self.cx.facts.inplaces[key] = Inplace(node, target_node, True, t.view_of_leaf and not leaf,
                                               t.objs, self.loops_here(), self.current_function(), self.entry_call())
            if not self.cx.one_of_several:  # torch raises here: nothing after it runs on this path
                self.frame.raised_at = self.frame.statement
            return target_val  # (the tensor stays the leaf it was: no graph, no `.grad` warning)
        elif key in self.cx.facts.inplaces and not self.cx.facts.inplaces[key].leaf_requires_grad:
            del self.cx.facts.inplaces[key]  # a leaf error seen on one real path stays
        sure = sole_storage(t.objs) if definite else frozenset()
        hit, sure_hit = self.version_bump(node, t.objs, st, sure)
        if hit:  # the values in hand were read before the bump
            sure_marks = frozenset((DIRTY, r) for r in sure_hit)

            def stale(x):
                carried = frozenset((DIRTY, r) for k, r in x.sure if k == CARRIES) & sure_marks
                return replace(x, dirty=x.dirty | (x.regions & hit), sure=x.sure | carried)
            target_val = map_tensors(target_val, stale)
            others = [map_tensors(o, stale) for o in others]
        if st.grad is False or _tri_or([t.rg, *map(_requires_grad, others)]) is False:
            return target_val  # nothing in it requires grad: no graph (unknown operands may bring one)
        info = op if not isinstance(op, str) else K.resolve(op, [self.kind(o) for o in others], (), method=True)
        bound = {"self": target_val}
        for p, v in zip(info.positional_params(True), others):
            bound[p] = v
        new = self.op_result(node, info, bound, [target_val, *others], st, view=True, base=target_val)
        nt = tensor_of(new)
        if nt is not None:
            # the target keeps its shape, and its several elements if the result has them (an in-place
            # op that succeeds has the broadcast shape of its operands) or it had
            new = frozenset({replace(nt, view_of_leaf=t.view_of_leaf, leaf=False, shape=t.shape,
                                     several=nt.several or t.several)})
            self.cx.graph_inplaces += 1
            if t.rg is not True and nt.rg is not False and len(t.objs) == 1:
                mark_grad_gained(st, next(iter(t.objs)), tensor_of(new), definite)
        if target_node is not None:
            self.rebind(target_node, new, st)
        return new

    def version_bump(self, node, objs, st, sure=frozenset()) -> tuple[frozenset, frozenset]:
        """Every region that saved one of `objs` may now hold a stale version; those that saved
        one of the `sure` storages (modified for sure, each one a single runtime storage)
        surely do.  Returns (may, sure) regions."""
        hit = frozenset(r for o in objs for r in self.cx.saved_index.get(o, ()))
        if not hit:
            return hit, hit
        regs = self.cx.facts.regions
        sure = {o for o in sure if not is_summary(o)}
        sure_hit = frozenset(r for r in hit if regs[r].certain and regs[r].saved_sure & sure)
        self.cx.sure_events += bool(sure_hit)
        for rid in sure_hit:
            self.cx.facts.dirtied_by.setdefault(rid, set()).add(node)
            regs[rid].modified |= {n for o in regs[rid].saved_sure & sure for n in regs[rid].saved_as[o]}
            regs[rid].stale |= regs[rid].saved_sure & sure
        mark_dirty(st, hit, sure=sure_hit)
        return hit, sure_hit

    def rebind(self, target, value, st):
        if isinstance(target, ast.Subscript):
            base = self.peek(target.value, st) if not isinstance(target.value, ast.Name) else \
                self.lookup(target.value.id, st)
            bt = tensor_of(base)
            nt = tensor_of(value)
            if bt is not None and nt is not None:
                merged = replace(bt, regions=bt.regions | nt.regions, freed=bt.freed | nt.freed,
                                 dirty=bt.dirty | nt.dirty, rg=True if nt.rg else bt.rg,
                                 leaf=False if nt.rg else bt.leaf)
                self.rebind(target.value, frozenset({merged}), st)
        elif isinstance(target, ast.Name):
            self.bind(target.id, value, st)
        elif isinstance(target, ast.Attribute):
            base = self.peek(target.value, st)
            for obj in base:
                if isinstance(obj, Obj):
                    st.set_attr(obj.id, target.attr, value, strong=len(base) == 1)

    def augassign_tensor(self, s, current, rhs, st):
        name = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_", ast.Pow: "pow_"}.get(
            type(s.op), "add_")
        numeric = frozenset(a for a in current if not isinstance(a, Tensor))
        new = self.inplace(s, s.target, frozenset(a for a in current if isinstance(a, Tensor)), [rhs], st, name,
                           definite=not numeric)
        if numeric:
            other = self.binop(s, s.op, numeric, rhs, st, s.target, s.value)
            self.rebind(s.target, join(new, other), st)
        self.note_accumulation(s, rhs)

    def note_accumulation(self, s, rhs):
        t = tensor_of(rhs)
        key = self.key(s)
        if self.frame.loops and isinstance(s.op, ast.Add) and t is not None and t.rg is True:
            loops = tuple((self.frame.ctx, gid(loop)) for loop in self.frame.loops)
            self.cx.facts.accumulations[key] = Accumulation(s, self.site_key(s), loops)
        else:
            self.cx.facts.accumulations.pop(key, None)

    # ----------------------------------------------------------------- backward
    def backward(self, node, root_node, value, retain, st, inputs=None, sure_inputs=frozenset()):
        """`inputs`: the storages `autograd.grad` may differentiate by, when known: it runs (and
        frees) only the part of the graph that leads to them; `sure_inputs`, those it surely
        differentiates by: only what leads to them surely runs."""
        t = tensor_of(value)
        if t is None:
            return
        self.note_event("backward", node)
        self.cx.sure_events += 1
        definite = all(isinstance(a, Tensor) for a in value)
        regs = self.cx.facts.regions

        def surely_runs(r):
            return inputs is None or regs[r].reaches is not None and bool(regs[r].reaches & sure_inputs)

        freed_hit = frozenset(r for r in t.sure_regions(FREED) if r in regs and regs[r].sure_saves
                              and regs[r].certain and surely_runs(r))
        dirty_hit = frozenset(r for r in t.sure_regions(DIRTY) if r in regs and regs[r].certain
                              and r not in freed_hit and surely_runs(r))
        if freed_hit and dirty_hit:  # torch runs the newest node first: its error is the one raised
            newest = lambda hit: max(regs[r].order for r in hit)  # noqa: E731
            freed_hit, dirty_hit = (freed_hit, frozenset()) if newest(freed_hit) > newest(dirty_hit) else \
                (frozenset(), dirty_hit)
        key = self.key(node)
        prev = self.cx.facts.backwards.get(key)
        no_grad_fn = definite and t.rg is False and st.grad is not None
        if prev is not None and (prev.freed_hit or prev.dirty_hit or prev.no_grad_fn):
            # An earlier visit (an earlier iteration) raised already: that is the error this line gives.
            freed_hit, dirty_hit, no_grad_fn = prev.freed_hit, prev.dirty_hit, prev.no_grad_fn
            carriers = prev.carriers
        else:
            carriers = self.carriers(freed_hit | dirty_hit, st) if freed_hit or dirty_hit else ()
        self.cx.facts.backwards[key] = Backward(
            node, root_node, retain, self.loops_here(), self.current_function(), t.regions, freed_hit, dirty_hit,
            no_grad_fn, carriers, freed_hit & t.dirty, t.cut, self.entry_call())
        self.cx.facts.consumed_regions |= {r[:-1] for r in t.regions}
        if t.rg is not False:
            self.grads_written(st)
        if definite and t.rg is True:
            reached = frozenset(o for r in t.sure_regions(CARRIES) if r in regs for o in regs[r].leaves)
            self.update_sure_grads(st, lambda objs: objs | reached)
        if retain is False and t.rg is not False:
            sure = frozenset(r for r in t.sure_regions(CARRIES) if r in regs and surely_runs(r)) \
                if definite and t.rg is True else frozenset()
            runs = t.regions if inputs is None else frozenset(
                r for r in t.regions if r not in regs or regs[r].reaches is None or regs[r].reaches & inputs)
            mark_freed(st, runs, sure=sure)
            for r in sure:
                self.cx.facts.freed_by.setdefault(r, set()).add(node)

    def carriers(self, regions, st) -> tuple:
        """Names (and `self.` attributes) whose values hold the given stale regions here, each
        with the shape a fix must detach: "tensor", "tuple" (an LSTM's `(h, c)`), "named_tuple"
        (`State(v=..., i=...)`, rebuilt as its own type) or "list" (the states of stacked cells)."""
        out = []
        scopes = [("", st.heap.get(self.frame.globals, {}) if self.frame.is_module else st.env)]
        fr = self.frame
        if fr.self_value is not None:
            for obj in objs_of(fr.self_value):
                scopes.append(("self.", st.heap.get(obj.id, {})))
        for prefix, scope in scopes:
            for name, v in scope.items():
                if name.startswith("<"):
                    continue
                tuples = [a for a in v if isinstance(a, Tup)]
                lists = objs_of(v, "list") if not tuples else []
                parts = [tensor_of(i) for a in tuples for i in a.items] if tuples else \
                    [tensor_of(self.iter_elements(frozenset(lists), st))] if lists else [tensor_of(v)]
                if any(t is not None and (t.freed | t.dirty) & regions for t in parts):
                    shape = ("named_tuple" if all(a.names for a in tuples) else "tuple") if tuples else \
                        "list" if lists else "tensor"
                    out.append((prefix + name, shape))
        return tuple(sorted(out))

    def retain_flag(self, kwargs, positional=None):
        """retain_graph as torch binds it: the keyword or its position, else create_graph's value."""
        v = kwargs.get("retain_graph", positional)
        if v is None or v == NONE:
            v = kwargs.get("create_graph")
        if v is None:
            return False
        truth = self.truth_of(v)
        return truth if truth is not None else None

    # ----------------------------------------------------------------- tensors: attributes and methods
    def tensor_attribute(self, v, name, st, node):
        t = tensor_of(v)
        if name == "grad":
            if t.leaf is False and not t.retains_grad and t.rg is True:
                self.cx.facts.grad_reads[self.key(node)] = GradRead(node)
            else:
                self.cx.facts.grad_reads.pop(self.key(node), None)
            return frozenset({Tensor(rg=False, leaf=True)})
        if name in K.DETACH_ATTRIBUTES:  # `.data`: no graph, and a version counter of its own
            return frozenset({Tensor(rg=False, leaf=True, cut=self.cut_by(node, [v], st), inference=t.inference,
                                     deps=frozenset(), shape=t.shape, dtype=t.dtype)})
        if name in ("T", "mT", "H", "mH", "real", "imag"):
            shape = t.shape if name in ("real", "imag") or t.shape is None else \
                t.shape[::-1] if name in ("T", "H") else t.shape[:-2] + t.shape[-2:][::-1] if len(t.shape) >= 2 else None
            return self.with_several(self.with_shape(self.view_of(v, node, st), shape), several(v))
        if name == "requires_grad":
            return const(t.rg) if t.rg is not None else UNKNOWN
        if name == "is_leaf":
            return const(t.leaf) if t.leaf is not None else UNKNOWN
        if name in K.SIZE_ATTRIBUTES:  # `x.shape`: numbers, no tensor (`size=out.shape[-2:]` brings no graph)
            return self.sizes(v, st, node)
        if name == "ndim" and t.shape is not None and len(v) == 1:
            return const(len(t.shape))
        if name == "dtype" and t.dtype is not None and len(v) == 1:  # `y.to(x.dtype)`
            return frozenset({Ref("torch." + t.dtype)})
        if name == "device" and t.device == "cpu" and len(v) == 1:  # as `torch.device("cpu")` is: its name
            return const("cpu")  # (a GPU's index is not known: two CUDA tensors may be on different ones)
        if name in K.GRAPH_FREE_ATTRIBUTES or not K.is_tensor_attribute(name):
            return UNKNOWN  # `out.sample`: `out` was no tensor (a model's output object), whatever we thought
        return frozenset({Method(v, name)})

    def set_tensor_attribute(self, base, name, v, st, target):
        t = tensor_of(base)
        if name == "requires_grad":
            flag = self.truth_of(v)
            self.set_requires_grad(target, target.value, sure_tensor(base), flag, setter=True)
            # past this line the tensor is a leaf: on a non-leaf the assignment raises
            new = frozenset({replace(t, rg=flag if flag is not None else None, leaf=True)})
            if len(base) == 1 and flag is not None:
                mark_flag_set(st, t, flag)
            self.rebind(target.value, new, st)
            self.set_parameters_rg(t, const(flag) if flag is not None else UNKNOWN, st)
        elif name == "data" and len(base) == 1 and (vt := tensor_of(v)) is not None and len(v) == 1:
            # `p.data = v`: the same tensor object, holding v's values: of v's dtype and shape, and an
            # inference tensor if v is one (a weight gathered under inference mode, kept for training)
            self.rebind(target.value, frozenset({replace(t, inference=vt.inference, dtype=vt.dtype, shape=vt.shape)}),
                        st)
        elif name == "grad":
            self.note_event("zero_grad", target)
            if v != NONE:  # `p.grad = torch.zeros_like(p)`: set, but not from a backward we can see
                return
            self.update_sure_grads(st, lambda objs: objs - t.objs)

    def set_parameters_rg(self, t: Tensor, flag, st) -> None:
        """Parameters' requires_grad changed: all of their modules' (`for p in m.parameters()`),
        or one parameter's (`lin.weight`, an `nn.Parameter` of a class), the others keeping theirs."""
        own = t.ident[1:] if t.ident is not None and t.ident[0] == "param" else None
        for o in t.objs:
            if o[0] != "params":
                continue
            key = own[1] if own is not None and own[0] == o[1] else next((p for p in t.objs if p[0] == "param"), None)
            if key is None:
                self.set_module_rg(o[1], flag, st)
            else:
                truth = self.truth_of(flag)
                st.set_attr(o[1], RG_BY_NAME, frozenset(Const(frozenset({**(d or {}), key: truth}.items()))
                                                        for d in self.param_flags(o[1], st)))
                self.cx.frozen_by[o[1]] = self.cx.statement

    def set_module_rg(self, mid, flag, st) -> None:
        """Every parameter of one module now has `flag` (its `<rg>`, no flag set one by one), an
        `nn.Parameter` its class set as an attribute too: read later, it has the flag."""
        st.set_attr(mid, "<rg>", flag)
        st.set_attr(mid, RG_BY_NAME, NO_FLAGS)
        truth = self.truth_of(flag)
        for n, v in list((st.heap.get(mid) or {}).items()):
            if not n.startswith("<") and v and all(isinstance(a, Tensor) and a.leaf is True
                                                   and ("params", mid) in a.objs for a in v):
                st.set_attr(mid, n, frozenset(replace(a, rg=truth) for a in v))
        self.cx.frozen_by[mid] = self.cx.statement

    def param_flags(self, mid, st) -> list:
        """The flags of the parameters of a module set one by one: a dict (name -> True, False or
        None) per alternative, None for one not known."""
        return [dict(a.value) if isinstance(a, Const) else None for a in st.get_attr(mid, RG_BY_NAME) or NO_FLAGS]


    def tensor_method(self, v, name, args, kwargs, st, node):
        t = tensor_of(v)
        recv = node.func.value if isinstance(node.func, ast.Attribute) else None
        if name == K.BACKWARD_CALLS.tensor_method:
            params = K.BACKWARD_CALLS.tensor_method_args["params"]
            if len(args) > len(params) or not set(kwargs) <= set(params):
                return UNKNOWN  # `retain_variables=True` (torch < 0.4): a TypeError, before any backward
            pos = K.BACKWARD_CALLS.tensor_method_args["retain_graph_arg"]
            gradient = K.BACKWARD_CALLS.tensor_method_args["gradient_arg"]
            if len(args) <= gradient and params[gradient] not in kwargs:
                self.implicit_gradient(node, recv, v, st)
            self.backward(node, recv, v, self.retain_flag(kwargs, args[pos] if len(args) > pos else None), st)
            return NONE
        if name in K.FACTORY_METHODS:
            rg = self.truth_of(kwargs[K.REQUIRES_GRAD_KEYWORD]) if K.REQUIRES_GRAD_KEYWORD in kwargs else False
            return self.fresh_tensor(node, st, rg=rg)
        if name in K.DETACH_METHODS:  # the same storage: an inference tensor stays one
            new = frozenset({Tensor(rg=False, leaf=True, objs=t.objs, cut=self.cut_by(node, [v], st),
                                    inference=t.inference, deps=frozenset(), shape=t.shape)})
            if name == "detach_":
                if len(v) == 1:
                    mark_detached(st, t)
                if recv is not None:
                    self.rebind(recv, new, st)
                self.set_parameters_rg(t, const(False), st)  # `for p in ema.parameters(): p.detach_()`
            return new
        if name == "requires_grad_":
            flag = self.truth_of(args[0]) if args else self.truth_of(kwargs.get("requires_grad", const(True)))
            self.set_requires_grad(node, recv, sure_tensor(v), flag, setter=False)
            # a non-leaf raises on False and stays a non-leaf on True; a leaf stays a leaf
            leaf = True if flag is False or t.leaf is True else (t.leaf if t.rg is True else None)
            new = frozenset({replace(t, rg=flag, leaf=leaf)})
            if len(v) == 1 and flag is not None:
                mark_flag_set(st, t, flag)
            if recv is not None:
                self.rebind(recv, new, st)
            self.set_parameters_rg(t, const(flag) if flag is not None else UNKNOWN, st)
            return new
        if name == "retain_grad":
            if recv is not None:
                self.rebind(recv, frozenset({replace(t, retains_grad=True)}), st)
            return NONE
        if name in ("numel", "nelement", "dim", "ndimension") and not args and t.shape is not None and len(v) == 1:
            n = numel(t.shape) if name in ("numel", "nelement") else len(t.shape)  # `if mems.numel():`
            if n is not None:
                return const(n)
        if name in K.SIZE_METHODS:  # `x.size()`: numbers, no tensor; `x.size(0)`: a number
            dim = args[0] if args else kwargs.get("dim")
            return self.sizes(v, st, node) if dim is None else self.size_along(v, dim)
        if name in K.TO_NUMPY.methods:
            self.to_numpy(node, recv, v, kwargs, st)
            if len(v) == 1:  # a numpy array of its shape and dtype (no graph, whatever the tensor had)
                return frozenset({Array(shape=t.shape, dtype=t.dtype, ndarray=True)})
        if name in ("is_floating_point", "is_complex") and not args and len(v) == 1 and t.dtype is not None:
            return const(t.dtype in FLOATING if name == "is_floating_point" else t.dtype.startswith("complex"))
        if name in K.GRAPH_FREE_METHODS:
            return frozenset({Num()}) if name == "item" else UNKNOWN
        if name in ("to", "cpu", "cuda") and len(v) == 1 and t.device is not None \
                and self.conversion_device(name, args, kwargs) == t.device \
                and self.converted_dtype(name, args, kwargs) in (None, t.dtype) \
                and (name != "to" or len(args) <= 1) and self.truth_of(kwargs.get("copy", const(False))) is False:
            return v  # to the device it is on, in its dtype: the tensor itself (an inference tensor stays one)
        if name == "type" and not args and not kwargs:
            return UNKNOWN  # the name of its type, a string
        if name in CONVERSIONS:
            leaf = self.converted_leaf(name, args, kwargs, t) if t.rg is not False else t.leaf
            # a new tensor made in inference mode is an inference tensor (a copy surely is new)
            like = tensor_of(args[0]) if name == "to" and args and len(args[0]) == 1 else None  # `x.to(y)`
            # `.to("cpu")`, `.to(device=...)`: a device alone keeps the dtype; an argument not read may be one
            device_only = all(literal_of(a, str) is not None for a in args) and "dtype" not in kwargs
            dtype = like.dtype if like is not None else self.converted_dtype(name, args, kwargs) or \
                (t.dtype if name in ("cuda", "cpu") or name == "to" and device_only else None)
            # the tensor itself only when nothing is converted (a dtype it has, no device): else a copy may be
            same = t.dtype is not None and self.converted_dtype(name, args, kwargs) == t.dtype and \
                not (name == "to" and device_given(args, kwargs)) and name not in ("cuda", "cpu") and \
                self.truth_of(kwargs.get("copy", const(False))) is False
            # surely a copy when it changes the dtype: a new tensor object, made here
            copy = t.dtype is not None and dtype is not None and dtype != t.dtype and len(v) == 1
            inference = t.inference if same else \
                self.inference_site() if copy or t.inference is not None else None
            ident = t.ident if same else ("t",) + self.region_id(node, "copy") if copy else None
            out = replace(t, leaf=leaf, inference=inference, dtype=dtype, ident=ident,
                          device=self.converted_device(name, args, kwargs, t))
            return frozenset({self.conversion_region(node, out) if leaf is False and t.leaf is not False else out})
        if name in IDENTITY_METHODS and name not in K.NONDIFF_METHODS:  # the same values, maybe a copy
            return frozenset({replace(t, ident=None)}) if len(v) == 1 else v
        if name in K.NONDIFF_METHODS and name not in K.INPLACE_RESHAPES:  # `.long()`, `.argmax(1)`: no graph
            return self.with_shape(self.fresh_tensor(node, st, rg=False, inputs=[v]),
                                   t.shape if name in K.SAME_SHAPE_OPS and not args else None)
        if name == "register_hook":
            return UNKNOWN
        arg_nodes = [recv] + list(node.args) if isinstance(node, ast.Call) else None
        out = self.with_shape(self.apply_op(name, node, [v, *args], kwargs, st, arg_nodes=arg_nodes),
                              self.method_shape(name, t, args, kwargs))
        if name in K.INPLACE_RESHAPES and len(v) == 1 and (changed := tensor_of(out)) is not None:
            # `x.unsqueeze_(0)`: the tensor object itself has the out-of-place op's shape now
            out = frozenset({replace(changed, shape=self.method_shape(name[:-1], t, args, kwargs),
                                     several=changed.several and name[:-1] in K.SAME_NUMEL_OPS)})
            mark_reshaped(st, t, tensor_of(out).shape)
            if recv is not None:
                self.rebind(recv, out, st)
        return out

    def eval_name(self, source, st) -> frozenset:
        """`eval("Detect")`, `eval("nn.Conv2d")`: a constant string naming something is what the
        name means here (a config-driven model builder's class); any other text is not known."""
        out = EMPTY
        for a in source:
            text = a.value.strip() if isinstance(a, Const) and isinstance(a.value, str) else None
            try:
                expr = number(ast.parse(text, mode="eval"), "<eval>").body if text else None
            except SyntaxError:
                return UNKNOWN
            base = expr
            while isinstance(base, ast.Attribute):
                base = base.value
            if not isinstance(base, ast.Name):
                return UNKNOWN
            v = self.peek(expr, st)
            if not v or any(isinstance(x, Unknown) for x in v):
                return UNKNOWN
            out = join(out, v)
        return out or UNKNOWN

    @staticmethod
    def slice_of(args) -> frozenset:
        """`slice(stop)`, `slice(start, stop[, step])` with numbers or None known: the `Span` a
        subscript `start:stop:step` makes."""
        bounds = [None if a == NONE else int_of(a) for a in args]
        if not 1 <= len(args) <= 3 or any(b is None and a != NONE for a, b in zip(args, bounds)):
            return frozenset({SomeSlice()}) if 1 <= len(args) <= 3 else UNKNOWN
        parts = ([None] + bounds if len(bounds) == 1 else bounds) + [None] * (3 - max(len(bounds), 2))
        return const(Span(*parts)) if parts[2] != 0 else UNKNOWN

    def conversion_region(self, node, t: Tensor) -> Tensor:
        """A leaf converted into a copy with a grad_fn (`w.to(torch.float32)`, `w.cuda()`): the
        copy's graph is a region of its own, saving nothing, so a finding about the non-leaf
        (an optimizer given it) points at the conversion and a fix can make the leaf there."""
        if not isinstance(node, ast.Call) or self.cx.widening:
            return t
        rid = self.region_id(node, "convert")
        self.region(rid, node, (), (), False, [], certain=t.rg is True)
        return replace(t, regions=t.regions | {rid}, sure=t.sure | {(CARRIES, rid)} if t.rg is True else t.sure)

    @staticmethod
    def device_named(v) -> str | None:
        """"cpu" or "cuda" for a device given by name (`"cuda:0"`, `torch.device("cpu")`), else None."""
        name = literal_of(v, str) if v else None
        kind = name.split(":")[0] if name is not None else None
        return kind if kind in ("cpu", "cuda") else None

    def conversion_device(self, name, args, kwargs) -> str | None:
        """The device `.cpu()`, `.cuda()` or `.to(device)` moves a tensor to, when known by name
        (`x.to(y)` also takes y's dtype: not known here)."""
        if name in ("cpu", "cuda"):
            return name if name == "cpu" or not args else None
        given = kwargs.get("device", args[0] if args else None)
        return self.device_named(given) if given is not None and tensor_of(given) is None else None

    def converted_device(self, name, args, kwargs, t: Tensor) -> str | None:
        """The device a conversion leaves a tensor on: a dtype alone keeps it (`.float()`,
        `.to(torch.float64)`); `.cuda()`, `.to(device)` move it where they say, `x.to(y)` and
        `x.type_as(y)` to y's, and `.type("torch.cuda.FloatTensor")` anywhere."""
        if name in ("to", "type_as") and args and len(args[0]) == 1 and tensor_of(args[0]) is not None:
            return tensor_of(args[0]).device
        if name in ("cpu", "cuda") or name == "to" and device_given(args, kwargs):
            return self.conversion_device(name, args, kwargs)
        return None if name in ("type", "type_as") else t.device

    def identity(self, v) -> tuple | None:
        """Which one object `v` surely is (a tensor made here, an object), for `id(v)`; None when
        it may be several (a summary of many iterations' objects, a join)."""
        (a,) = tuple(v) if len(v) == 1 else (None,)
        ident = a.ident if isinstance(a, Tensor) else a.id if isinstance(a, Obj) else None
        # numbered: made once by this evaluation (an optimizer's id stands for each one made at its line)
        return ident if ident is not None and isinstance(ident[-1], int) else None

    def converted_leaf(self, name, args, kwargs, t: Tensor):
        """A conversion (`.to(...)`, `.double()`) returns the tensor itself when it changes
        nothing and a copy with a grad_fn otherwise: a leaf is no longer surely one, except
        for a copy to a GPU, which a CPU tensor always is."""
        device = kwargs.get("device") or (args[0] if args else None)
        to_gpu = name == "cuda" or name == "to" and device is not None and isinstance(
            literal_of(device, str), str) and literal_of(device, str).startswith("cuda")
        if to_gpu and t.rg is True:
            return False
        if name == "to" and self.truth_of(kwargs.get("copy", const(False))) is not False:
            return False if t.rg is True else None  # `copy=True`: a copy, with a grad_fn
        if name == "type" and args and t.rg is True and t.dtype is not None:
            # `.type(torch.DoubleTensor)`, `.type(torch.cuda.FloatTensor)` (each type it may be): a copy
            # when the dtype changes or the tensor goes to a GPU
            targets = [self.legacy_type(a) for a in args[0]]  # (a copy to an integer type has no grad_fn)
            if targets and all(dtype in FLOATING and (gpu or dtype != t.dtype) for dtype, gpu in targets):
                return False
        target = self.converted_dtype(name, args, kwargs)
        if target is not None and t.dtype is not None and t.rg is True:
            if target != t.dtype:
                return False  # another dtype: a copy, with a grad_fn, whatever the device
            other = tensor_of(args[0]) if name in ("to", "type_as") and args and len(args[0]) == 1 else None
            if other is not None:  # `x.to(y)`, `x.type_as(y)`: y's device too
                same = other.device is not None and other.device == t.device
            else:
                same = name != "to" or not device_given(args, kwargs)
            if same:
                return t.leaf  # the same dtype on the same device: the tensor itself
        return t.leaf if t.leaf is False else None

    def legacy_type(self, a) -> tuple:
        """(dtype, on a GPU) of a tensor type given to `.type()`: `torch.DoubleTensor`,
        `torch.cuda.FloatTensor`, a dtype (`torch.float64`) or its name as a string."""
        dotted = a.dotted if isinstance(a, Ref) else a.value if isinstance(a, Const) and isinstance(a.value, str) \
            else None
        if dotted is None or not dotted.startswith("torch."):
            return None, False
        last = dotted.rsplit(".", 1)[-1]
        return K.TYPED_FACTORIES.get(last) or self.dtype_named(frozenset({Ref(dotted)})), \
            dotted.startswith("torch.cuda.")

    def converted_dtype(self, name, args, kwargs):
        """The dtype `.double()` or `.to(torch.float64)` converts to, when known."""
        if name in K.DTYPE_METHODS:
            return K.DTYPE_METHODS[name]
        if name == "to":
            given = kwargs.get("dtype") or next((a for a in args if self.dtype_named(a)), None)
            if given is None and args and len(args[0]) == 1 and tensor_of(args[0]) is not None:
                return tensor_of(args[0]).dtype  # `x.to(other)`: other's dtype (and device)
            return self.dtype_named(given) if given is not None else None
        if name == "type_as" and args and len(args[0]) == 1 and tensor_of(args[0]) is not None:
            return tensor_of(args[0]).dtype
        return None

    def dtype_named(self, v):
        """"float64" for the value `torch.float64` (or `torch.double`), None if not one."""
        names = {"double": "float64", "float": "float32", "half": "float16", "long": "int64", "int": "int32"}
        for a in v if len(v) == 1 else ():
            if isinstance(a, Ref) and a.dotted.startswith("torch."):
                last = a.dotted.rsplit(".", 1)[-1]
                return names.get(last, last)
        return None

    # ----------------------------------------------------------------- method calls on anything
    def call_method(self, recv, name, args, kwargs, st, node):
        if len(recv) == 1:  # the common case, without a closure
            return self.method_of(next(iter(recv)), recv, name, args, kwargs, st, node) or UNKNOWN
        return self.alternatives(recv, st, lambda a, st: self.method_of(a, recv, name, args, kwargs, st, node))

    def method_of(self, a, recv, name, args, kwargs, st, node):
        """A method call on one alternative `a` of the receiver `recv`."""
        if isinstance(a, Tensor):
            return self.tensor_method(frozenset({a}), name, args, kwargs, st, node)
        if isinstance(a, Array):
            return array_method(a, name, args)
        if isinstance(a, Obj) and a.kind == "module":
            return self.module_method(a, name, args, kwargs, st, node, strong=len(recv) == 1)
        if isinstance(a, Obj) and a.kind == "optimizer":
            return self.optimizer_method(a, name, args, kwargs, st, node)
        if isinstance(a, Obj) and a.kind == "scaler":
            return self.scaler_method(a, name, args, kwargs, st, node)
        if isinstance(a, Obj) and a.kind == "distribution":
            return self.distribution_method(a, name, args, st, node)
        if isinstance(a, Obj) and a.kind == "hook":
            return self.hook_handle_method(a, name, st)
        if isinstance(a, Obj) and a.kind == "argparser":
            return self.parser_method(a, name, args, kwargs, st, node)
        if isinstance(a, Obj) and a.kind == "class" and name == "apply" \
                and self.derives_from(a.id, st, lambda dotted: dotted.endswith(".autograd.Function")):
            return self.custom_function(a.id, args, st, node)
        if isinstance(a, Obj) and a.kind in ("list", "dict", "generator"):
            return self.container_method(a, name, args, kwargs, st, node, strong=len(recv) == 1)
        if isinstance(a, Super):
            return self.super_method(a, name, args, kwargs, st, node)
        if isinstance(a, GradMode) and name in ("__enter__", "__exit__") and len(recv) == 1:
            return self.manual_grad_mode(a, name, st, node)
        if isinstance(a, Const) and isinstance(a.value, str) and not kwargs:
            return str_method(a.value, name, args)
        return self.unknown_method(name, args, kwargs, st, node)

    def custom_function(self, cls_id, args, st, node):
        """`Spike.apply(x, slope)` of a custom `torch.autograd.Function`: one op on its tensor
        arguments, whose result requires grad when one of them does and carries their graphs;
        it saves them when its `forward` calls `ctx.save_for_backward` (what backward does
        with them is its own code).  Its `forward` runs too, with grad off, as torch runs it:
        what it does to the objects it is given (an ODE solver's function) happens."""
        cls = self.cx.class_nodes.get(cls_id)
        forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None) \
            if cls is not None else None
        if forward is not None:
            self.cx.grad_funcs[forward] = False
            self.call_function(Func(forward, kind="staticmethod"), [UNKNOWN, *args], {}, st, node)
        tensors = [v for v in args if tensor_of(v) is not None]
        if not tensors or any(tensor_of(v) is None and not isinstance(next(iter(v), None), (Const, Num))
                              for v in args):
            return self.call_unknown(args, {}, st, node)
        saves = cls is not None and any(isinstance(n, ast.Attribute) and n.attr == "save_for_backward"
                                        for n in ast.walk(cls))
        if saves and st.grad is True and self.inference_site() is None and any(_requires_grad(v) is True
                                                                                for v in tensors):
            for i in _saved_arguments(cls):  # saving an inference tensor for backward raises
                t = tensor_of(args[i]) if i < len(args) and len(args[i]) == 1 else None
                if t is not None and t.inference is not None:
                    arg = node.args[i] if isinstance(node, ast.Call) and i < len(node.args) else None
                    self.note_raise("inference_tensor", node, arg, t, origin=(t.inference,))
                    break
        whole = self.all_of(tensors)
        return self.apply_op("mul" if saves else "add", node, [whole, whole], {}, st)

    def unknown_method(self, name, args, kwargs, st, node):
        """A method of something the engine does not model: `accelerator.backward(loss)` and
        Lightning's `self.manual_backward(loss)` run backward on their tensor argument."""
        pos = K.BACKWARD_CALLS.loss_methods.get(name)
        if pos is not None and len(args) > pos and tensor_of(args[pos]) is not None:
            root = node.args[pos] if len(node.args) > pos else None
            self.backward(node, root, args[pos], self.retain_flag(kwargs), st)
            return NONE
        if name in K.ZERO_GRAD_METHODS:
            self.note_event("zero_grad", node)
            self.update_sure_grads(st, lambda objs: frozenset())  # which grads it cleared is unknown
        self.detached_unknown(name, st)
        return self.call_unknown(args, kwargs, st, node)

    @staticmethod
    def detached_unknown(name, st) -> None:
        """`buf.detach_()` on something not known (a buffer `buffers()` did not list one by one):
        any tensor may be the one whose graph is cut."""
        if name in K.DETACH_METHODS and name.endswith("_"):
            mark_detached(st, None)

    def make_distribution(self, args, kwargs, st, node):
        """A `torch.distributions` object: its parameters are the tensors it is made from, and
        those of a distribution it wraps (`Independent(Normal(mu, std), 1)`)."""
        params = []
        for v in [*args, *kwargs.values()]:
            for inner in objs_of(v, "distribution"):
                params += self.exact_items(st.get_attr(inner.id, "<params>") or UNKNOWN, st) or [UNKNOWN]
            if tensor_of(v) is not None:
                params.append(v)
        obj = Obj(("dist",) + self.region_id(node, "dist"), "distribution")
        st.set_attr(obj.id, "<params>", frozenset({Tup(tuple(params))}))
        return frozenset({obj})

    def distribution_method(self, obj, name, args, st, node):
        """`log_prob`, `entropy`, `rsample`: computed from the parameters (and the value given)
        by ops that save what backward needs, then by one that saves nothing (a Normal's last
        subtraction): modelled as an op that saves only its own result (a Categorical's
        log_softmax), negated, so that backward frees a graph but no in-place change the
        program can make, of a parameter, the value or the result, is a finding; `sample`: a
        draw without a graph."""
        if name in K.DISTRIBUTIONS.sample_methods:
            return self.fresh_tensor(node, st, rg=False)
        if name not in K.DISTRIBUTIONS.graph_methods:
            return UNKNOWN
        params = self.exact_items(st.get_attr(obj.id, "<params>") or UNKNOWN, st)
        inputs = [*(params or [UNKNOWN]), *(v for v in args if tensor_of(v) is not None)]
        if any(tensor_of(v) is None for v in inputs):
            return self.call_unknown(inputs, {}, st, node)
        saving = self.apply_op("log_softmax", node, [self.all_of(inputs)], {}, st, method=True)
        return self.apply_op("neg", node, [saving], {}, st, method=True, sub=1)

    def container_method(self, obj, name, args, kwargs, st, node, strong=False):
        """List and dict methods.  On the one list a name surely holds (`strong`), `append`,
        `insert` and `extend` keep its exact items: `layers = [nn.Linear(4, 8)]`, then
        `layers.append(nn.ReLU())` is two known layers, not one that is both."""
        if obj.kind == "dict" and name in ("get", "pop", "setdefault") and args:
            return self.dict_lookup(obj, name, args, st, strong)
        if obj.kind == "dict" and name == "copy":
            return self.new_dict(node, [EMPTY], [frozenset({obj})], st)
        if obj.kind == "dict" and name in ("pop", "popitem", "setdefault", "clear", "__setitem__"):
            st.set_attr(obj.id, "<keyset>", UNKNOWN)
            self.vars_written(obj, None, UNKNOWN, st)
        if name in ("append", "add", "insert", "appendleft", "extend", "extendleft"):
            self.grow(obj, name if name != "extendleft" else "extend", args, st, strong and obj.kind == "list",
                      "<elems>")
            if name == "extendleft":  # (in reverse order, at the front: a bound drops others)
                self.forget_items(obj, st)
            return NONE
        if name in ("sort", "reverse", "rotate") and obj.kind == "list":
            st.set_attr(obj.id, "<items>", UNKNOWN)  # the same items, in an order not known here
            return NONE
        if name == "__setitem__" and len(args) == 2:  # `d.__setitem__(k, v)`, a lambda's way to write `d[k] = v`
            self.set_item(frozenset({obj}), args[0], args[1], st, node, node)
            return NONE
        if name == "pop" and obj.kind == "list" and strong and (taken := self.pop_known(obj, args, st)) is not None:
            return taken
        if name in ("pop", "popleft", "remove") and obj.kind == "list":
            self.forget_items(obj, st)  # one item fewer
        if name in ("pop", "popleft", "get", "setdefault", "__getitem__"):
            return st.get_attr(obj.id, "<elems>") or UNKNOWN
        if name in ("items", "values", "keys") and (view := self.dict_view(obj, name, st, node)) is not None:
            return view
        if name in ("values", "copy"):
            return self.make_sequence(st.get_attr(obj.id, "<elems>") or UNKNOWN, st, node)
        if name == "items":
            return self.make_sequence(frozenset({Tup((st.get_attr(obj.id, "<keys>") or UNKNOWN,
                                                      st.get_attr(obj.id, "<elems>") or UNKNOWN))}), st, node)
        if name == "keys":
            return self.make_sequence(st.get_attr(obj.id, "<keys>") or UNKNOWN, st, node)
        if name == "update" and obj.kind == "dict":
            self.dict_update(obj, args[0] if args else EMPTY, kwargs, st)
            return NONE
        if name == "clear":
            self.cleared(obj, st, strong)
            return NONE
        return UNKNOWN

    def pop_known(self, obj: Obj, args, st):
        """`xs.pop()` / `xs.pop(i)` on the one list a name holds, its items known: that item, the
        others staying known one by one (a cache emptied with `while cache: cache.pop()`)."""
        items = self.exact_items(frozenset({obj}), st)
        pos = int_of(args[0]) if args else -1
        if not items or pos is None or not -len(items) <= pos < len(items) or len(args) > 1:
            return None
        pos %= len(items)
        rest = items[:pos] + items[pos + 1:]
        self.forget_items(obj, st)  # what it surely holds: no longer the popped item
        st.set_attr(obj.id, "<items>", frozenset({Tup(rest)}))
        st.set_attr(obj.id, "<nonempty>", const(True) if rest else UNKNOWN)
        return items[pos]

    def dict_in_order(self, obj: Obj, st) -> list | None:
        """The items of a dict whose keys are all known, in the order they were first set."""
        keys = self.keyset(obj, st) if obj.kind == "dict" else None
        if keys is None:
            return None
        by_attr = {item_attr(k): k for k in keys}
        attrs = st.heap.get(obj.id) or {}
        order = [by_attr[n] for n in attrs if n in by_attr]
        return [(k, attrs[item_attr(k)]) for k in order] if len(order) == len(keys) else None

    def dict_view(self, obj: Obj, name, st, node):
        """`d.items()`, `d.values()`, `d.keys()` item by item, when the dict's are known."""
        known = self.dict_in_order(obj, st)
        if known is None:
            return None
        vals = [frozenset({Tup((key_value(k), v))}) if name == "items" else v if name == "values" else key_value(k)
                for k, v in known]
        return self.known_sequence(vals, st, node)

    def dict_update(self, obj: Obj, other, kwargs, st) -> None:
        """`d.update(other, **kwargs)`: each item of `other` (a dict whose keys are known), then
        each keyword, replaces the one under its key; an item not known by key may replace any."""
        dicts = objs_of(other, "dict")
        items = self.dict_in_order(dicts[0], st) if len(other) == 1 and len(dicts) == 1 else None  # in its order
        if items is None:
            items = [(None, join_all(st.get_attr(d.id, "<elems>") or UNKNOWN for d in dicts) if dicts else UNKNOWN)]
        for key, v in (items if other else []) + list(kwargs.items()):
            st.set_attr(obj.id, "<elems>", v, strong=False)
            st.set_attr(obj.id, "<keys>", key_value(key) if key is not None else UNKNOWN, strong=False)
            self.set_dict_item(obj, key, v, st)

    def cleared(self, obj, st, strong):
        """`xs.clear()`: on the one container a name surely holds, no element, no item and no
        key is left (`<items>` too: the exact list the next `append` grows); on one of several,
        what each held may still be there, no longer known one by one."""
        if not strong:
            for name in [n for n in st.heap.get(obj.id) or () if n == "<items>" or is_item_attr(n)]:
                st.set_attr(obj.id, name, UNKNOWN)
            if obj.kind == "list":
                st.set_attr(obj.id, HELD, HELD_NOTHING)
                st.set_attr(obj.id, self.CONTAINS, UNKNOWN)
                st.set_attr(obj.id, self.NONLEAF, EMPTY)
            return
        attrs = {"<elems>": EMPTY}
        if obj.kind == "dict":
            attrs.update({"<keys>": EMPTY, "<keyset>": const(frozenset())})
            if "<default>" in st.heap.get(obj.id, {}):  # a defaultdict keeps its factory
                attrs["<default>"] = st.heap[obj.id]["<default>"]
        else:
            attrs.update({"<items>": frozenset({Tup(())}), HELD: HELD_NOTHING})
        if MAXLEN in st.heap.get(obj.id, {}):  # a deque keeps its bound
            attrs[MAXLEN] = st.heap[obj.id][MAXLEN]
        st.heap[obj.id] = attrs

    def dict_lookup(self, obj, name, args, st, strong):
        """`d.get(k)`, `d.pop(k, None)`, `d.setdefault(k, v)`: the item under a key the dict
        surely has; the default (None unless given) under one it surely lacks; otherwise either
        (the item stored under that key, if one was), so that `cache.get(k) is not None` is not
        taken to hold.  `setdefault` stores the default
        under a key it lacks, `pop` removes the key (on the one dict a name surely holds, `strong`;
        on one of several, the keys are no longer known)."""
        default = args[1] if len(args) > 1 else (EMPTY if name == "pop" else NONE)  # `pop(k)` raises instead
        elems = st.get_attr(obj.id, "<elems>") or UNKNOWN
        key, keys = item_key(args[0]), self.keyset(obj, st)
        has = None if key is None or keys is None else key in keys
        item = st.get_attr(obj.id, item_attr(key)) if key is not None else None  # what was stored under it
        out = default if has is False else item or elems if has else join(item or elems, default)
        if name == "setdefault" and has is not True:
            st.set_attr(obj.id, "<elems>", join(elems, default))
            if key is None:
                for n in [n for n in st.heap.get(obj.id) or () if is_item_attr(n)]:
                    st.set_attr(obj.id, n, default, strong=False)
            else:
                st.set_attr(obj.id, item_attr(key), out, strong=strong)
        if name in ("setdefault", "pop") and keys is not None:
            new = keys | {key} if name == "setdefault" else keys - {key}
            st.set_attr(obj.id, "<keyset>", const(new) if strong and key is not None else UNKNOWN)
        return out

    def deque(self, iterable, maxlen, st, node):
        """`deque(xs, maxlen=n)`: a list that keeps its last `n` items as it grows (see `bounded`)."""
        made = self.call_builtin("list", [iterable], {}, st, node) if iterable is not None else \
            self.known_sequence([], st, node)
        if maxlen != NONE:
            n = int_of(maxlen)
            st.set_attr(next(iter(made)).id, MAXLEN, const(n) if n is not None else UNKNOWN)
            self.bounded(next(iter(made)), "extend", st)
        return made

    def bounded(self, obj, name, st) -> None:
        """A deque past its `maxlen` drops items from the other end (the first ones after `append`
        or `extend`, the last after `appendleft`): those it still has are known one by one when its
        bound is; a bound not known leaves them, and what it surely holds, unknown."""
        bound = st.get_attr(obj.id, MAXLEN)
        if bound is None:
            return
        n = int_of(bound) if len(bound) == 1 else None
        items = self.exact_items(frozenset({obj}), st)
        if n is not None and items is not None:
            if len(items) > n:
                items = items[len(items) - n:] if name != "appendleft" else items[:n]
                st.set_attr(obj.id, "<items>", frozenset({Tup(tuple(items))}))
                st.set_attr(obj.id, HELD, self.all_of([HELD_NOTHING, *items]))
        else:
            st.set_attr(obj.id, "<items>", UNKNOWN)
            st.set_attr(obj.id, HELD, HELD_NOTHING)

    def grow(self, obj, name, args, st, strong, elems_attr):
        """`append`, `insert`, `extend` (and `add_module`) on a list or a module container: the
        exact items stay known on the one object a name surely holds (`strong`)."""
        added = [args[-1] if args else UNKNOWN] if name != "extend" else \
            (self.exact_items(args[0], st) if args else None)
        items = self.exact_items(frozenset({obj}), st) if strong else None
        new = None
        if items is not None and added is not None:
            # exact layers or tensors: what a concrete iteration keeps and a widened one loses
            self.cx.sure_events += any(tensor_of(a) is not None or objs_of(a, "module") for a in added)
            if name == "insert":
                pos = int_of(args[0]) if len(args) == 2 else None
                new = None if pos is None else items[:pos] + tuple(added) + items[pos:]
            elif name == "appendleft":
                new = tuple(added) + items
            else:
                new = items + tuple(added)
        elems = join_all(added) if added is not None else (self.iter_elements(args[0], st) if args else UNKNOWN)
        held = st.get_attr(obj.id, HELD) if strong and added else None
        if held is not None:  # what it surely held, it still holds, and now these too
            st.set_attr(obj.id, HELD, self.all_of([held, *added]))
        st.set_attr(obj.id, elems_attr, elems, strong=False)
        st.set_attr(obj.id, "<items>", frozenset({Tup(new)}) if new is not None else UNKNOWN)
        if name != "extend" or added:
            st.set_attr(obj.id, "<nonempty>", const(True))
        self.bounded(obj, name, st)

    def super_method(self, sup, name, args, kwargs, st, node):
        """`super().name(...)` in a method of class C: the classes after C in the MRO of
        `type(self)` (a mixin's `super()` reaches its sibling `nn.Linear`), C's own bases when
        the instance's class is not known."""
        selves = [a for a in sup.self_value if isinstance(a, Obj)]
        classes = {self.cx.obj_class.get(a.id) for a in selves}
        line = self.mro(next(iter(classes)), st) if len(classes) == 1 and None not in classes else None
        after = line[line.index(Obj(sup.class_id, "class")) + 1:] if line and Obj(sup.class_id, "class") in line else None
        for base in after if after is not None else self.bases_of(sup.class_id, st):
            if name == "__init__" and isinstance(base, Ref) and base.dotted.startswith("torch.optim.") \
                    and (args or "params" in kwargs):  # `class Hybrid(torch.optim.Optimizer)`: torch's checks run
                self.optimizer_params_leaf(kwargs.get("params") or args[0], kwargs, st, node,
                                           node.args[0] if isinstance(node, ast.Call) and node.args else None)
                return NONE
            layer = self.library_layer(base)
            if layer is not None and len(selves) == 1 and self.cx.module_kind.get(selves[0].id) == layer:
                # `class Dense(nn.Linear)`: `super().__init__(i, o)` and `super().forward(x)` do what torch's do
                m = selves[0]
                if name == "__init__":
                    attrs = self.library_attrs(m, layer, K.module_info(layer), args, kwargs, st, node,
                                               dict(st.heap.get(m.id) or {}))
                    st.heap[m.id] = attrs
                    return NONE
                if name in ("forward", "__call__"):
                    return self.module_call(m, args, kwargs, st, node)
                return self.module_method(m, name, args, kwargs, st, node)
            if self.is_module_ref(base) and len(selves) == 1 and selves[0].kind == "module" and \
                    name not in ("__init__", "forward", "__call__"):
                return self.module_method(selves[0], name, args, kwargs, st, node)  # `super().train(mode)`
            if isinstance(base, Obj) and base.kind == "class":
                # along the MRO each class by itself; along C's bases, each with its own bases
                found = st.get_attr(base.id, name) if after is not None else self.class_lookup(base.id, name, st)
                if found is not None:
                    if selves:
                        return self.call_value(self.bind_class_member(found, selves[0], st, node), args, kwargs,
                                               st, node)
        return NONE

    # ----------------------------------------------------------------- calls of library names
    def call_ref(self, dotted, args, kwargs, st, node):
        if dotted.startswith("builtins."):
            return self.call_builtin(dotted[9:], args, kwargs, st, node)
        last = dotted.rsplit(".", 1)[-1]
        root = dotted.split(".")[0]
        if last in ("tqdm", "trange"):
            return self.make_sequence(self.iter_elements(args[0], st) if args else UNKNOWN, st, node)
        if dotted in NAMESPACES:
            return self.namespace(args, kwargs, st, node)
        if dotted == "argparse.ArgumentParser":
            return self.make_parser(st, node, kwargs)
        if dotted == "torch.is_tensor" and args:  # `isinstance(x, torch.Tensor)`
            t = self.isinstance_truth(args[0], frozenset({Ref("torch.Tensor")}), st)
            return const(t) if t is not None else UNKNOWN
        if dotted in K.FUNCTIONAL_CALLS and (out := self.functional_call(args, kwargs, st, node)) is not None:
            return out
        if dotted == "copy.deepcopy" and args:
            return self.deep_copy(args[0], st, node)
        if dotted == "types.MethodType" and len(args) == 2 and not kwargs and args[0] \
                and all(isinstance(f, Func) and f.bound is None for f in args[0]):
            # `block.forward = types.MethodType(new_forward, block)`: the function bound to that object
            return frozenset(replace(f, bound=args[1]) for f in args[0])
        if dotted == "functools.partial" and args and (all(isinstance(a, Ref) for a in args[0]) or len(args[0]) == 1) \
                and self.cx.unknown_spread is not node and self.cx.unknown_keywords is not node:
            # a library function with arguments bound (`partial(checkpoint, use_reentrant=True)`) or one function of
            # the project (`partial(self.save_output, name)` as a hook); a choice between functions of the project
            # (`partial(fast if flag else slow, ...)`) stays an unknown call: following each from every call site
            # multiplied the work (torch's gradcheck.py 7x slower)
            return frozenset({Partial(args[0], tuple(args[1:]), tuple(kwargs.items()))})
        if dotted in K.CHECKPOINT.functions and args:
            return self.checkpoint(args, kwargs, st, node)
        if dotted in K.THREAD_POOLS:
            return frozenset({Ref(THREAD_POOL)})
        if dotted in (THREAD_POOL + ".submit", THREAD_POOL + ".map") and args:
            return self.in_new_thread(dotted.rsplit(".", 1)[-1], args, kwargs, st, node)
        if dotted in K.REPARAMETRIZATIONS and args and objs_of(args[0], "module"):
            return self.reparametrize(K.REPARAMETRIZATIONS[dotted], args, kwargs, st)
        if dotted == "dataclasses.asdict" and len(args) == 1 and not kwargs:
            return self.instance_dict(args[0], st, node, live=False)
        if dotted == "collections.OrderedDict":  # a dict that keeps its order, as every dict does
            return self.call_builtin("dict", args, kwargs, st, node)
        if dotted == "collections.defaultdict" and len(args) == 1 and not kwargs:  # empty, with a factory
            made = self.new_dict(node, [], [], st)
            st.set_attr(next(iter(made)).id, "<default>", args[0])
            return made
        if dotted == "collections.deque" and len(args) <= 2 and set(kwargs) <= {"iterable", "maxlen"}:
            return self.deque(kwargs.get("iterable", args[0] if args else None),
                              kwargs.get("maxlen", args[1] if len(args) > 1 else NONE), st, node)
        if dotted == "collections.namedtuple" and len(args) >= 2:
            return self.namedtuple_type(args[1], kwargs.get("defaults"), st)
        if dotted in ("math.ceil", "math.floor") and len(args) == 1 and not kwargs \
                and (x := literal_of(args[0], int, float)) is not None and math.isfinite(x):  # `math.ceil(n / 16)`
            return const(math.ceil(x) if dotted == "math.ceil" else math.floor(x))
        if dotted in K.PYTHON_NUMBERS:  # `math.sqrt(d)`, `random.uniform(0, 1)`: a number, never a tensor
            return frozenset({Num()})
        if dotted in ("itertools.chain",):  # nonempty when one of its iterables is
            return self.make_sequence(join_all(self.iter_elements(a, st) for a in args), st, node,
                                      nonempty=any(self.is_nonempty(a, st) for a in args) or None)
        if dotted in K.TO_NUMPY.functions or dotted in K.TO_NUMPY.sequence_functions and args and is_sequence(args[0]):
            # numpy converts each array argument (`np.allclose(a, b)`): the first that refuses raises
            for arg_node, arg in list(zip(node.args, args))[:1 if dotted not in K.TO_NUMPY.functions else None]:
                if not isinstance(arg_node, ast.Starred):
                    self.to_numpy(node, arg_node, arg, kwargs, st, sequence=True)
        if dotted.startswith("numpy.") and len(args) == 1 and is_sequence(args[0]):
            items = self.exact_items(args[0], st)
            if items is not None and (made := from_numbers(dotted[6:], items, kwargs)) is not None:
                return made
            arrays = [array_of(i) for i in items] if items is not None else None
            # (arrays not known one by one: the one standing for all gives the dtype, not the shape)
            made = joined(dotted[6:], arrays, kwargs) if arrays is not None else \
                joined(dotted[6:], [array_of(self.iter_elements(args[0], st))], {"axis": UNKNOWN})
            if made is not None:
                return made
        if dotted.startswith("numpy.") and (made := call_numpy(dotted[6:], args, kwargs)) is not None:
            return made
        if root not in ("torch", "nn", "F") and not dotted.startswith(("torch.", "pytorch_lightning", "lightning")):
            return self.call_unknown(args, kwargs, st, node)
        return self.call_torch(dotted, last, args, kwargs, st, node)

    def namespace(self, args, kwargs, st, node):
        """`argparse.Namespace(lr=0.1, freeze=False)`: a config object whose attributes are
        its keywords (a flag it holds decides a branch: `if args.freeze:`)."""
        if args or self.cx.unknown_keywords is node:  # `**config` not known item by item
            return self.call_unknown(args, kwargs, st, node)
        obj = Obj(("obj",) + self.region_id(node, "obj"), "instance")
        self.cx.sure_events += 1
        st.heap[obj.id] = dict(kwargs)
        return frozenset({obj})

    def call_torch(self, dotted, last, args, kwargs, st, node):
        if dotted in K.NO_GRAD_CONTEXTS:
            flag = kwargs.get("mode", args[0] if args else None)
            truth = True if flag is None or dotted not in K.INFERENCE_MODE_CONTEXTS else self.truth_of(flag)
            if truth is None:  # `inference_mode(self.inference_mode)`, the flag not known
                return frozenset({GradMode(None)})
            if truth is False:
                return frozenset({GradMode(True, leaves_inference=True)})
            return frozenset({GradMode(False, inference=dotted in K.INFERENCE_MODE_CONTEXTS)})
        if dotted in K.ENABLE_GRAD_CONTEXTS:
            return frozenset({GradMode(True)})
        if dotted in K.GRAD_MODE_QUERIES and not args and not kwargs:
            # (outside a block the engine saw, inference mode is known not to be on only where grad is)
            inference = True if self.inference_site() is not None else False if st.grad is True else None
            mode = st.grad if K.GRAD_MODE_QUERIES[dotted] == "grad" else inference
            return const(mode) if mode is not None else UNKNOWN
        converted = tensor_from_array(last, array_of(args[0])) if args and array_of(args[0]) else None
        if converted is not None:  # `torch.tensor(points)`, `torch.from_numpy(x)`: the array's shape and dtype
            rg = self.truth_of(kwargs[K.REQUIRES_GRAD_KEYWORD]) if K.REQUIRES_GRAD_KEYWORD in kwargs else False
            made = tensor_of(self.fresh_tensor(node, st, rg=rg))
            dtype = self.dtype_named(kwargs["dtype"]) if "dtype" in kwargs else converted[1]
            device = self.factory_device(last, args, kwargs)
            return frozenset({replace(made, shape=converted[0], dtype=dtype, device=device)})
        if dotted in K.SET_GRAD_ENABLED:
            flag = self.truth_of(args[0]) if args else None
            st.grad = flag
            self.cx.grad_off_call = node if flag is False else None
            return frozenset({GradMode(flag)})
        if last in ("autocast",):
            off = "enabled" in kwargs and self.truth_of(kwargs["enabled"]) is False
            return frozenset({GradMode("keep", autocast=not off)})
        if dotted in K.MODULE_WRAPPERS and args and objs_of(args[0], "module"):
            return args[0]
        if last in ("GradScaler",):
            obj = Obj(("scaler", self.frame.ctx, gid(node)), "scaler")
            return frozenset({obj})
        if last in K.OPTIMIZERS and ".optim" in dotted and "lr_scheduler" not in dotted:
            return self.make_optimizer(args, kwargs, st, node)
        if dotted == "torch.autograd.grad":
            return self.autograd_grad(args, kwargs, st, node)
        if dotted == "torch.autograd.backward":
            roots = kwargs.get("tensors") or (args[0] if args else UNKNOWN)
            if self.no_gradient_given("torch.autograd.backward", args, kwargs):
                self.implicit_gradient(node, node.args[0] if node.args else None, roots, st)
            val = self.iter_elements(roots, st) if objs_of(roots) or any(isinstance(a, Tup) for a in roots) else roots
            self.backward(node, node.args[0] if node.args else None, val, self.retain_flag(kwargs), st)
            return NONE
        if dotted in K.PARAMETER_CLASSES:
            flag = self.truth_of(kwargs["requires_grad"]) if "requires_grad" in kwargs else True
            # ("param", ...): assigned to a module attribute, it joins that module's parameters
            data = tensor_of(kwargs.get("data", args[0] if args else EMPTY))  # its shape and dtype
            return frozenset({Tensor(rg=flag, leaf=True, objs=frozenset({("param",) + self.region_id(node)}),
                                     deps=frozenset(), shape=data.shape if data else None,
                                     dtype=data.dtype if data else None)})
        if last == "Variable":  # `Variable(t, requires_grad=flag)` is `t.detach()` with the flag: a new leaf
            v = args[0] if args else UNKNOWN
            t = tensor_of(v)
            if t is None:
                return v
            flag = self.truth_of(kwargs.get("requires_grad", args[1] if len(args) > 1 else const(False)))
            return frozenset({Tensor(rg=flag, leaf=True, objs=t.objs, cut=self.cut_by(node, [v], st) if not flag
                                     else frozenset(), inference=t.inference, deps=frozenset(), shape=t.shape,
                                     dtype=t.dtype)})
        if dotted.startswith(K.DISTRIBUTIONS.package + ".") and last[:1].isupper():
            return self.make_distribution(args, kwargs, st, node)
        info = K.module_info(last) if ".nn" in dotted or dotted.startswith("nn.") else None
        if info is not None and last[:1].isupper():
            return self.make_module(last, info, args, kwargs, st, node)
        if last == "from_pretrained" and (".nn" in dotted or dotted.startswith("nn.")):
            return self.pretrained_module(dotted.split(".")[-2], args, kwargs, st, node)
        if last in K.FACTORIES and dotted.startswith("torch"):
            if last in K.FACTORIES_SHARING_INPUT and args and K.REQUIRES_GRAD_KEYWORD not in kwargs \
                    and any(isinstance(a, (Tensor, Unknown)) for a in args[0]):
                # `torch.as_tensor(x, dtype=...)` of a tensor: `x` itself, or a conversion keeping its graph
                if len(args[0]) != 1 or tensor_of(args[0]) is None:
                    return UNKNOWN
                options = {k: v for k, v in kwargs.items() if k in ("dtype", "device")}
                return self.tensor_method(args[0], "to", [], options, st, node)
            if last in K.FACTORIES_NUMBERS_ONLY and any(tensor_of(a) is not None for a in args):
                return self.apply_op("normal", node, args, kwargs, st, method=False, arg_nodes=list(node.args))
            rg = self.truth_of(kwargs[K.REQUIRES_GRAD_KEYWORD]) if K.REQUIRES_GRAD_KEYWORD in kwargs else False
            # `torch.tensor(log_probs)` copies the values of the tensors in a list, not their graph
            copied = [self.iter_elements(a, st) if is_sequence(a) else a for a in args[:1]
                      if is_sequence(a) or tensor_of(a) is not None]  # (`torch.tensor(t)`: t's values)
            made = self.with_shape(self.fresh_tensor(node, st, rg=rg, inputs=copied),
                                   self.factory_shape(last, args, kwargs, st))
            dtype = self.dtype_named(kwargs["dtype"]) if "dtype" in kwargs else \
                ("float32" if last in K.DEFAULT_FLOAT_FACTORIES and not self.cx.default_dtype_set else None) or \
                K.TYPED_FACTORIES.get(last) or \
                (fill_dtype(args[1], None if self.cx.default_dtype_set else "float32")
                 if last == "full" and len(args) > 1 else None) or \
                (tensor_of(args[0]).dtype if last in K.INPUT_DTYPE_FACTORIES and args and len(args[0]) == 1
                 and tensor_of(args[0]) is not None else None) or \
                (self.data_dtype(args[0], st) if last in ("tensor", "as_tensor") and args else None)
            return frozenset({replace(tensor_of(made), dtype=dtype or tensor_of(made).dtype,
                                      device=self.factory_device(last, args, kwargs))})
        if last in ("stack", "cat", "concat", "concatenate", "hstack", "vstack", "dstack") and args:
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            items = self.exact_items(args[0], st)
            elements = self.iter_elements(args[0], st) if items is None and is_sequence(args[0]) else None
            return self.with_shape(self.apply_op(last, node, args, kwargs, st, method=False, arg_nodes=list(node.args)),
                                   self.joined_shape(last, items, dim, elements))
        if last == "meshgrid" and args and set(kwargs) <= {"indexing"}:  # `torch.meshgrid(xs, ys, indexing="ij")`
            out = self.apply_op(last, node, args, kwargs, st, method=False, arg_nodes=list(node.args))
            items = args if len(args) > 1 or tensor_of(args[0]) is not None else self.exact_items(args[0], st)
            shape = grid([shape_of(i) for i in items], kwargs.get("indexing")) if items else None
            if shape is None or tensor_of(out) is None:
                return out
            return frozenset({Tup(tuple(self.with_shape(out, shape) for _ in items))})  # one grid per input
        if last == "set_default_dtype":
            self.cx.default_dtype_set = True  # the factories' dtype is no longer float32 for sure
        if dotted in ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"):
            return self.tensor_dataset(args, st, node)
        if dotted in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
            return self.data_loader(args, kwargs, st, node)
        if last == "device" and len(args) == 1 and (named := self.device_named(args[0])) is not None:
            return const(named)  # `torch.device("cpu")`: the device, as its name
        if "lr_scheduler" in dotted or last in ("manual_seed", "device", "is_available", "set_printoptions",
                                                "seed", "set_default_dtype", "DataLoader", "TensorDataset"):
            return UNKNOWN
        if last in ("clip_grad_norm_", "clip_grad_value_"):
            return frozenset({Num()})
        if ".init." in dotted or dotted.startswith("init."):
            # torch.nn.init functions write in place under no_grad: a version bump, never a leaf error
            t = tensor_of(args[0]) if args else None
            if t is not None:
                self.inplace_inference(node, node.args[0] if node.args else None, args[0])
                self.version_bump(node, t.objs, st)
            return args[0] if args else UNKNOWN
        tensor_args = [a for a in [*args, *kwargs.values()] if tensor_of(a) is not None]  # `torch.mul(input=x, ...)`
        if not tensor_args and not any(self.is_tensor_list(a, st) for a in args):  # `torch.einsum(eq, [q, k])`
            return self.call_unknown(args, kwargs, st, node)
        arg_nodes = list(node.args) if isinstance(node, ast.Call) else None
        if last in K.DROPOUTS.functions and (".functional" in dotted or dotted.startswith("F.")) \
                and (args or "input" in kwargs) and self.dropout_is_identity(last, args, kwargs):
            return args[0] if args else kwargs["input"]  # `F.dropout(x, training=False)` is x itself
        if kwargs.get("inplace") == const(True):
            self.cx.facts.inplace_flags[node] = (node, None)  # `F.relu(x, inplace=True)`
            first = args[0] if args and tensor_of(args[0]) is not None else tensor_args[0]
            return self.inplace(node, node.args[0] if node.args else None, first,
                                [a for a in args if a is not first], st, last + "_")
        prefix = "F." if ".functional" in dotted or dotted.startswith("F.") else ""
        return self.apply_op(prefix + last, node, args, {k: v for k, v in kwargs.items() if k != "inplace"}, st,
                             method=False, arg_nodes=arg_nodes)

    def factory_device(self, last, args, kwargs) -> str | None:
        """The device a factory's tensor is on: the one it names, its input's (`zeros_like(x)`),
        the CPU for memory numpy or a buffer owns (`torch.from_numpy`), else the default device
        when it is known to be the CPU."""
        if "device" in kwargs:
            return self.device_named(kwargs["device"])
        if K.FACTORY_SHAPES.get(last) == "like":
            like = tensor_of(args[0]) if args and len(args[0]) == 1 else None
            return like.device if like is not None else None
        return "cpu" if last in K.FACTORIES_ON_CPU or self.cx.default_cpu else None

    def dropout_is_identity(self, name, args, kwargs) -> bool:
        """Whether the dropout function `name` surely returns its input: not training, or p 0."""
        p_pos, training_pos, training_default = K.DROPOUTS.functions[name]
        training = args[training_pos] if len(args) > training_pos else kwargs.get("training")
        p = args[p_pos] if len(args) > p_pos else kwargs.get("p")
        off = (self.truth_of(training) if training is not None else training_default) is False
        return off or (p is not None and literal_of(p, int, float) == 0)

    def is_tensor_list(self, v, st) -> bool:
        """Whether `v` is a list or tuple of tensors (the operands of `cat` or `einsum`)."""
        return is_sequence(v) and tensor_of(self.iter_elements(v, st)) is not None

    def autograd_grad(self, args, kwargs, st, node):
        outputs = kwargs.get("outputs") or (args[0] if args else UNKNOWN)
        outs = self.iter_elements(outputs, st) if objs_of(outputs) or any(isinstance(a, Tup) for a in outputs) \
            else outputs
        create = self.truth_of(kwargs["create_graph"]) if "create_graph" in kwargs else False
        retain = self.retain_flag(kwargs)
        root = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "outputs"), None)
        inputs_node = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords
                                                                   if k.arg == "inputs"), None)
        if inputs_node is not None:
            for n in ast.walk(inputs_node):
                if isinstance(n, (ast.Name, ast.Attribute)):
                    self.cx.facts.grad_inputs.add(self.cx.facts.text(n))
        given = kwargs.get("inputs") or (args[1] if len(args) > 1 else None)
        if self.no_gradient_given("torch.autograd.grad", args, kwargs):
            self.implicit_gradient(node, root, outputs, st)
        self.unused_inputs(outs, given, inputs_node, kwargs, st, node)
        self.backward(node, root, outs, retain if retain is not None else None, st, self.input_storages(given, st),
                      self.surely_given(given, st) if given is not None else frozenset())
        t = tensor_of(outs)
        if create and t is None:
            return UNKNOWN  # gradients with a graph, of outputs the engine does not see
        if create and t is not None:
            inputs = kwargs.get("inputs") or (args[1] if len(args) > 1 else UNKNOWN)
            grads = self.op_result(node, K.resolve("autograd_grad"), {}, [outs, self.iter_elements(inputs, st)],
                                   st, sub=1)
            grads = frozenset({replace(tensor_of(grads), freed=frozenset(), dirty=frozenset())})
        else:
            # plain tensors: where a later backward of them finds its graph cut (create_graph=False)
            grads = self.fresh_tensor(node, st, rg=False, sub=1, inputs=[outs])
        inputs = self.exact_items(given, st) if given is not None and is_sequence(given) else None
        return self.make_sequence(grads, st, node, nonempty=True,  # one gradient per input
                                  items=(grads,) * len(inputs) if inputs is not None else None)

    def no_gradient_given(self, dotted, args, kwargs) -> bool:
        """Whether a backward function is called without the gradient of its outputs."""
        spec = K.BACKWARD_CALLS.functions[dotted]
        key = next(k for k in spec if k.startswith("grad_") and k.endswith("_arg"))  # grad_outputs, grad_tensors
        return len(args) <= spec[key] and key[: -len("_arg")] not in kwargs

    def input_storages(self, given, st):
        """The storages of the tensors `autograd.grad` is given as `inputs`, None if not known."""
        if given is None:
            return None
        items = [given] if tensor_of(given) is not None else self.exact_items(given, st)
        if items is None:
            elems = self.iter_elements(given, st)
            items = [elems] if all(isinstance(a, Tensor) for a in elems) else None
        if items is None or not all(len(v) == 1 and tensor_of(v) is not None and tensor_of(v).objs for v in items):
            return None
        return frozenset().union(*(tensor_of(v).objs for v in items))

    def known_len(self, v, st):
        """`len(v)` when it is known: a list or tuple whose items are, a dict whose keys are
        (`range(len(self.peers))` then runs a known number of times)."""
        dicts = objs_of(v, "dict")
        if len(v) == 1 and len(dicts) == 1:
            keys = self.keyset(dicts[0], st)
            return None if keys is None else len(keys)
        items = self.exact_items(v, st)
        return None if items is None else len(items)

    def data_dtype(self, v, st, depth: int = 0) -> str | None:
        """The dtype `torch.tensor(data)` infers from literal data: floats give the default
        float dtype, ints int64, bools bool (mixed: the widest); a numpy array keeps its own."""
        if array_of(v) is not None:
            return array_of(v).dtype
        floating = None if self.cx.default_dtype_set else "float32"
        if len(v) == 1 and isinstance(next(iter(v)), Const):
            return fill_dtype(v, floating)
        items = self.exact_items(v, st) if depth < 3 else None
        kinds = {self.data_dtype(i, st, depth + 1) for i in items or ()}
        if not kinds or None in kinds:
            return None
        return next((k for k in (floating, "int64", "bool") if k in kinds), None) if kinds <= {floating, "int64", "bool"} \
            else None

    def type_of(self, a):
        """`type(a)`: a builtin container's class, or the class of an instance made here; None otherwise."""
        if isinstance(a, Tup):
            return None if a.names else Ref("builtins.tuple")
        if isinstance(a, Obj) and a.kind in ("list", "dict"):
            return Ref("builtins." + a.kind)
        if isinstance(a, Obj) and a.id in self.cx.obj_class:
            return Obj(self.cx.obj_class[a.id], "class")
        return None

    def call_builtin(self, name, args, kwargs, st, node):
        a0 = args[0] if args else UNKNOWN
        if name in ("any", "all") and len(args) == 1 and (items := self.exact_items(a0, st)) is not None:
            truths = [self.truth_of(i, st) for i in items]  # `any(nd in name for nd in no_decay)`
            if (True if name == "any" else False) in truths:
                return const(name == "any")
            if None not in truths:
                return const(name == "all")
        if name == "len" and (size := self.known_len(a0, st)) is not None:
            return const(size)
        if name == "len" and array_of(a0) is not None and array_of(a0).shape and array_of(a0).shape[0] is not None:
            return const(array_of(a0).shape[0])
        if name == "len" and len(a0) == 1 and tensor_of(a0) is not None:
            return self.size_along(a0, const(0))  # `len(x)` of a tensor: its first dimension
        if name == "len" and len(a0) == 1 and isinstance(obj := next(iter(a0)), Obj) \
                and (cls := self.cx.obj_class.get(obj.id)) is not None \
                and (size := self.class_lookup(cls, "__len__", st)) is not None:
            n = self.call_value(self.bind_class_member(size, obj, st, node), [], {}, st, node)
            return n if int_of(n) is not None else frozenset({Num()})  # `len(ds)` runs the class's `__len__`
        if name in ("property", "staticmethod", "classmethod") and len(args) == 1 and len(a0) == 1 \
                and isinstance(f := next(iter(a0)), Func) and f.kind == "function" and not kwargs:
            return frozenset({replace(f, kind=name)})  # `srcdata = property(lambda self: self.ndata)`
        if name == "type" and len(args) == 1 and (kinds := {self.type_of(a) for a in a0}) and None not in kinds \
                and len(kinds) == 1:  # `type(outputs)(gen)` rebuilds a tuple (a gather of replicas' outputs)
            return frozenset(kinds)
        if name == "id" and (ident := self.identity(a0)) is not None:  # a cache keyed by `id(inputs)`
            return const(Token(ident))
        if name in ("len", "id", "hash", "round", "abs") and tensor_of(a0) is None:
            return frozenset({Num()}) if name in ("len", "id", "hash") or self.kind(a0) == "number" else UNKNOWN
        if name == "range":
            ints = [int_of(a) for a in args[:3]] or [None]
            start, stop, step = (0, ints[0], 1) if len(ints) == 1 else (ints + [1])[:3]
            count = len(range(start, stop, step)) if None not in (start, stop, step) and step else None
            sized = len(args) == 1 and args[0] == SIZE  # `range(x.shape[0])` runs, as `for t in x:` does
            seq = self.make_sequence(frozenset({Num()}), st, node, nonempty=bool(count) or sized or None)
            if start is not None and step:
                st.set_attr(objs_of(seq)[0].id, "<counter>", const(("range", start, step)))
            if count is not None:
                st.set_attr(objs_of(seq)[0].id, "<count>", const(count))
            return seq
        if name == "enumerate":
            start = int_of(args[1] if len(args) > 1 else kwargs.get("start", const(0)))
            items = self.exact_items(a0, st) if start is not None else None
            if items is not None:  # over known items: each pair known
                pairs = tuple(frozenset({Tup((const(start + i), item))}) for i, item in enumerate(items))
                return self.known_sequence(pairs, st, node)
            seq = self.make_sequence(frozenset({Tup((frozenset({Num()}), self.iter_elements(a0, st)))}), st, node,
                                     nonempty=self.is_nonempty(a0, st) or None)
            if start is not None:
                st.set_attr(objs_of(seq)[0].id, "<counter>", const(("enumerate", start, 1)))
            return seq
        if name == "zip":
            columns = [self.exact_items(a, st) for a in args]
            if args and None not in columns:  # over known items: each tuple known
                rows = tuple(frozenset({Tup(row)}) for row in zip(*columns))
                return self.known_sequence(rows, st, node)
            if self.cx.unknown_spread is node and isinstance(node, ast.Call) and node.args:
                # `zip(*rows)` of rows not known one by one: columns of any length, not 1-tuples
                column = self.make_sequence(join_all(self.iter_elements(a, st) for a in args), st, node.args[0])
                return self.make_sequence(column, st, node)
            return self.make_sequence(frozenset({Tup(tuple(self.iter_elements(a, st) for a in args))}), st, node)
        if name == "slice":  # `slice(a, b)`: the bounds `x[a:b]` has
            return self.slice_of(args) if not kwargs else UNKNOWN
        if name == "eval" and len(args) == 1 and not kwargs:
            return self.eval_name(a0, st)
        if name in ("list", "tuple", "sorted", "reversed", "set", "iter", "filter"):
            src = args[-1] if name == "filter" and args else a0
            if not args:
                out = self.make_sequence(EMPTY, st, node)
                return self.surely_lists(out, st) if name == "list" else out
            items = self.exact_items(src, st)
            out = self.make_sequence(self.iter_elements(src, st), st, node,
                                     nonempty=self.is_nonempty(src, st) or None,
                                     items=items if name in ("list", "tuple", "iter") else None)
            # what filter keeps depends on its predicate: only a non-leaf it surely keeps surely stays
            # (`filter(lambda p: p.requires_grad, model.parameters())`)
            member = self.nonleaf_member(src, st)
            if name == "filter" and member and (len(args) != 2 or args[0] == NONE or self.truth_of(
                    self.call_value(args[0], [member], {}, st.copy(), node)) is not True):
                member = EMPTY
            self.contains(out, self.contained(src, st) if name != "filter" else frozenset(), st, member)
            return self.surely_lists(out, st) if name in ("list", "sorted") else out
        if name == "map" and len(args) >= 2:  # each call makes its own containers (`map(list, zip(*rows))`)
            items = self.exact_items(args[1], st) if len(args) == 2 else None
            self.cx.unrolling += 1
            try:
                if items is not None and len(items) <= 16:  # a short known sequence: each item mapped
                    mapped = tuple(self.call_value(args[0], [item], {}, st, node) for item in items)
                    return self.known_sequence(mapped, st, node)
                elems = self.iter_elements(args[1], st)
                result = self.call_value(args[0], [elems], {}, st, node)
            finally:
                self.cx.unrolling -= 1
            return self.make_sequence(result, st, node)
        if name == "next":
            return self.iter_elements(a0, st)
        if name == "sum":
            elems = self.every_element(a0, st)
            if tensor_of(elems) is not None:
                out = self.apply_op("add", node, [elems, elems], {}, st)
                items = self.exact_items(a0, st)  # `sum([a, b])` is `0 + a + b`: the broadcast of them all
                return self.with_broadcast(out, [const(0), *items]) if items else out
            return frozenset({Num()}) if self.kind(elems) == "number" else UNKNOWN
        if name in ("min", "max"):
            vals = args if len(args) > 1 else self.exact_items(a0, st) or [self.iter_elements(a0, st)]
            known = [literal_of(v, int, float) for v in vals]
            if None not in known and not kwargs:  # `min(step / warmup, 1.0)` of known numbers
                return const(min(known) if name == "min" else max(known))
            return join_all(vals)
        if name == "isinstance" and len(args) == 2:
            t = self.isinstance_truth(a0, args[1], st)
            return const(t) if t is not None else UNKNOWN
        if name == "super":
            fn = self.current_function()
            owner = self.cx.owner_of.get(fn)
            fr = self.frame
            if isinstance(owner, ast.ClassDef) and fr.self_value is not None:
                return frozenset({Super(fr.self_value, ("class", gid(owner)))})
            return UNKNOWN
        attr = literal_of(args[1], str) if len(args) >= 2 else None  # `getattr(self, name)`, `name` known
        if name == "getattr" and attr is not None and len(args) == 3:  # `getattr(self, "cache", None)`
            has = {self.has_attribute(a, attr, st) for a in a0}
            found = self.attribute(a0, attr, st, node) if has != {False} else EMPTY
            return join(found, args[2]) if has != {True} else found
        if name == "getattr" and attr is not None:
            return self.attribute(a0, attr, st, node)
        if name == "setattr" and len(args) == 3:
            return self.setattr_call(a0, attr, args[1], args[2], st, node)
        if name == "hasattr" and attr is not None and a0:
            truths = {self.has_attribute(a, attr, st) for a in a0}
            if len(truths) == 1 and None not in truths:
                return const(truths.pop())
        if name == "float" and literal_of(a0, int, float, bool) is not None:  # `float(fill)`: a float, for dtypes
            return const(float(literal_of(a0, int, float, bool)))
        if name in ("bool", "int") and len(args) == 1 and literal_of(a0, int, float, bool) is not None:
            return const({"bool": bool, "int": int}[name](literal_of(a0, int, float, bool)))  # `bool(args.flag)`
        if name in ("float", "int", "bool"):  # whatever it converts: a number, no tensor (`int(rng.integers(n))`)
            return frozenset({Num()})
        if name == "str" and len(args) == 1 and (known := literal_of(a0, str, int, bool)) is not None:
            return const(str(known))  # `"BatchNorm" + str(dims) + "d"`
        if name == "print":
            return NONE
        if name == "vars" and len(args) == 1:
            return self.instance_dict(a0, st, node, live=True)
        if name == "dict":  # `dict(base, lr=0.1)`: base's items (or pairs, known one by one), then the keywords
            pairs = self.known_pairs(a0, st) if args and not objs_of(a0, "dict") else None
            if pairs is not None:
                return self.new_dict(node, [k for k, _ in pairs] + [const(k) for k in kwargs],
                                     [v for _, v in pairs] + list(kwargs.values()), st)
            first = [(EMPTY, args[0] if objs_of(args[0], "dict") and len(args[0]) == 1 else UNKNOWN)] if args else []
            return self.new_dict(node, [k for k, _ in first] + [const(k) for k in kwargs],
                                 [v for _, v in first] + list(kwargs.values()), st)
        return UNKNOWN

    def instance_dict(self, v, st, node, live: bool):
        """`vars(config)` (`live`: the object's own `__dict__`, whose writes are the object's) or
        `dataclasses.asdict(config)` (a copy of its fields): a dict of the attributes of the one
        object `v` is, when they are all known."""
        objs = objs_of(v, "instance")
        attrs = st.heap.get(objs[0].id) if len(v) == 1 and len(objs) == 1 else None
        if attrs is None or UNSEEN_ATTRS in attrs:
            return UNKNOWN
        fields = self.cx.dataclass_fields.get(self.cx.obj_class.get(objs[0].id)) if not live else None
        if not live and fields is None:
            return UNKNOWN
        names = [f[0] for f in fields] if fields is not None else [n for n in attrs if not n.startswith("<")]
        if any(n not in attrs for n in names):
            return UNKNOWN
        # a copy holds copies of tensors (`deepcopy`): not the object's, not known here
        vals = [attrs[n] if live or all(isinstance(a, (Const, Num)) for a in attrs[n]) else UNKNOWN for n in names]
        d = self.new_dict(node, [const(n) for n in names], vals, st)
        if live:
            st.set_attr(objs_of(d)[0].id, VARS_OF, v)
        return d

    def vars_written(self, d: Obj, key, v, st) -> None:
        """A write to the `__dict__` of an object (`vars(args)[key] = v`; `key` None: a write not
        known item by item, `update`, `pop`): the object's attribute, or all of them, changed."""
        for obj in objs_of(st.get_attr(d.id, VARS_OF) or EMPTY):
            if isinstance(key, str):
                st.set_attr(obj.id, key, v)
                continue
            for n in [n for n in st.heap.get(obj.id) or () if not n.startswith("<")]:
                st.set_attr(obj.id, n, UNKNOWN, strong=False)
            st.set_attr(obj.id, UNSEEN_ATTRS, const(True))

    def has_attribute(self, a, name: str, st):
        """`hasattr(a, name)` on an object of a class of this program: True for a member of its
        class, or an attribute set on every path; False for one set on none (`if not
        hasattr(self, "feats"): self.feats = ...` caches on the first call), unless a base
        class the engine cannot read, or torch.nn.Module itself, has it.  A tensor has what
        `torch.Tensor` has (`hasattr(x, "detach")`); None has no attribute but `object`'s."""
        if isinstance(a, Tensor) and K.is_tensor_attribute(name):
            return True
        if a == Const(None) and not name.startswith("__"):
            return False
        cls = self.cx.obj_class.get(a.id) if isinstance(a, Obj) and a.kind in ("instance", "module") else None
        if cls is None:
            return None
        if self.class_lookup(cls, name, st) is not None:
            return True
        has = st.surely_has(a.id, name)
        if has is False and (name in K.MODULE_ATTRIBUTES or not self.known_bases(cls, st)):
            return None
        return has

    def known_bases(self, cls, st, seen=None) -> bool:
        """Whether every base class of `cls` is one of this program, `object` or `torch.nn.Module`."""
        seen = seen if seen is not None else set()
        if cls in seen:
            return True
        seen.add(cls)
        for b in self.bases_of(cls, st):
            if isinstance(b, Obj) and b.kind == "class":
                if not self.known_bases(b.id, st, seen):
                    return False
            elif not (isinstance(b, Ref) and b.dotted in PLAIN_BASES):
                return False
        return True

    def known_pairs(self, v, st) -> list | None:
        """The (key, value) pairs of a sequence of pairs known one by one (`named_parameters()`)."""
        items = self.exact_items(v, st) if is_sequence(v) else None
        pairs = [a.items for p in items or ()
                 if len(p) == 1 and isinstance(a := next(iter(p)), Tup) and len(a.items) == 2]
        return pairs if items is not None and len(pairs) == len(items) else None

    def may_thaw(self, modules, st) -> None:
        """What code not seen did to `modules` may have made their parameters trainable again:
        frozen is no longer known of them or of their submodules."""
        for m in modules if self.cx.frozen_by else ():
            for x in self.submodules(m, st):
                if st.get_attr(x.id, "<rg>") == const(False):
                    st.set_attr(x.id, "<rg>", UNKNOWN)
                if any(flags is not None and False in flags.values() for flags in self.param_flags(x.id, st)):
                    st.set_attr(x.id, RG_BY_NAME, UNKNOWN)

    def call_unknown(self, args, kwargs, st, node):
        """A call the engine cannot see into.  Its result carries the graphs of its tensor
        arguments (a custom loss keeps the model's graph), but not their freed/dirty flags:
        the callee may have detached them (an imported `repackage_hidden`), and a finding
        must not rest on code nobody can see.  Modules given to it may leave with their
        parameters trainable again (an imported `set_requires_grad(net, True)`)."""
        self.may_thaw([m for v in [*args, *kwargs.values()] for m in self.flat_objects(v, st)], st)
        vals = [v for v in [*args, *kwargs.values()] if tensor_of(v) is not None]
        if not vals:
            return UNKNOWN
        regions, rgs = set(), []
        for v in vals:
            t = tensor_of(v)
            regions |= t.regions
            rgs.append(t.rg)
        rg = True if True in rgs and st.grad is True else None
        return frozenset({Tensor(frozenset(regions), rg=rg, leaf=None)}) | UNKNOWN

    # ----------------------------------------------------------------- modules
    def make_module(self, cls_name, info, args, kwargs, st, node):
        obj = Obj(("obj",) + self.region_id(node, "obj"), "module")  # `[nn.Linear(4, 4) for _ in ...]`: several
        self.cx.sure_events += 1
        self.cx.module_kind[obj.id] = cls_name
        st.heap[obj.id] = self.library_attrs(obj, cls_name, info, args, kwargs, st, node, self.new_module())
        return frozenset({obj})

    def pretrained_module(self, cls_name, args, kwargs, st, node):
        """`nn.Embedding.from_pretrained(weights, freeze=True)` (and EmbeddingBag's): the layer,
        sized by the weights' shape, its weight frozen unless `freeze` is false."""
        info = K.module_info(cls_name)
        if info is None or not info.has_params:
            return UNKNOWN
        shape = shape_of(args[0]) if args else None
        sizes = [const(n) for n in shape] if shape is not None and len(shape) == 2 else []
        m = self.make_module(cls_name, info, sizes, {}, st, node)
        freeze = self.truth_of(kwargs.get("freeze", args[1] if len(args) > 1 else const(True)))
        self.set_module_rg(next(iter(m)).id, const(not freeze) if freeze is not None else UNKNOWN, st)
        return m

    def new_module(self) -> dict:
        """The heap attributes of a module its constructor made here: no hooks, in training mode."""
        return self.no_hooks({"training": const(True)})

    def library_attrs(self, obj, cls_name, info, args, kwargs, st, node, attrs):
        """What a torch.nn class's `__init__` gives `obj` (`nn.Linear(4, 8)`, or `super().__init__(4, 8)`
        in a class derived from it): a container's layers, an in-place flag, sizes."""
        if info.container:
            # `<items>`: the layers one by one when known (a Sequential is their chain), `<layers>`: any of them
            items = None
            if cls_name == "Sequential" and len(args) == 1 and objs_of(args[0], "dict"):
                attrs["<layers>"] = self.iter_elements(args[0], st)  # an OrderedDict: order unknown here
            elif cls_name == "Sequential" and self.cx.unknown_spread is not node:
                items = tuple(args)
            elif cls_name == "Sequential":
                attrs["<layers>"] = join_all(args)  # `*layers` not known one by one: an opaque chain
            elif not args:
                items = ()
                if cls_name == "ModuleDict":
                    attrs[MODULE_KEYS] = const(())  # filled by `md[key] = m`
            elif is_sequence(args[0]):
                items = self.exact_items(args[0], st)
                attrs["<layers>"] = self.iter_elements(args[0], st)
            elif objs_of(args[0], "dict"):  # ModuleDict: its values; each by its key when the keys are known
                dicts = objs_of(args[0], "dict")
                attrs["<layers>"] = join_all(st.get_attr(d.id, "<elems>") or UNKNOWN for d in dicts)
                known = self.dict_in_order(dicts[0], st) if len(args[0]) == 1 else None
                for key, value in known or ():
                    if isinstance(key, str):  # `md["enc"]` and `md.enc`
                        attrs[item_attr(key)] = attrs[key] = value
                if known is not None and all(isinstance(k, str) for k, _ in known):
                    attrs[MODULE_KEYS] = const(tuple(k for k, _ in known))  # its children by name, in order
            else:
                attrs["<layers>"] = self.iter_elements(args[0], st)
            if items is not None:
                attrs["<items>"] = frozenset({Tup(items)})
                attrs["<layers>"] = join_all(items)
        flag = kwargs.get(info.inplace_arg) if info.inplace_arg else None
        position = None
        if flag is None and info.inplace_pos is not None and info.inplace_pos < len(args):
            flag, position = args[info.inplace_pos], info.inplace_pos
        if flag is not None and self.truth_of(flag) is True:
            attrs["<inplace>"] = const(True)
            self.cx.inplace_flags[obj.id] = (node, position)
        renorm = kwargs.get(info.renorm_arg) if info.renorm_arg else None
        if renorm is None and info.renorm_pos is not None and info.renorm_pos < len(args):
            renorm = args[info.renorm_pos]
        if renorm is not None and renorm != NONE:
            attrs["<renorms>"] = const(True) if NONE.isdisjoint(renorm) and renorm else UNKNOWN
        attrs.update(self.layer_sizes(cls_name, info, args, kwargs))
        names = self.layer_parameter_names(info, args, kwargs)
        if names is not None:
            attrs["<parameters>"] = const(names)
        dtype = self.dtype_named(kwargs["dtype"]) if "dtype" in kwargs else \
            "float32" if not self.cx.default_dtype_set else None
        if info.has_params and dtype is not None:  # its parameters' dtype (see convert_module)
            attrs["<dtype>"] = const(dtype)
        return attrs

    def submodules(self, m: Obj, st) -> list:
        """`m` and every module reachable from its attributes, in definition order.  Asked at
        every call of a layer: the answer is kept with the heap entries it was read from (a
        write replaces an entry, never changes it), and reused while they are all equal."""
        memo = self.cx.submodule_memo.get(m.id)
        if memo is not None and all((cur := st.heap.get(i)) is attrs or cur == attrs for i, attrs in memo[1]):
            return memo[0]  # (a join makes equal copies of the entries it does not change)
        read: dict = {}
        out = self._submodules(m, st, {}, read)
        self.cx.submodule_memo[m.id] = (out, tuple(read.items()))
        return out

    def _submodules(self, m: Obj, st, seen: dict, read: dict) -> list:
        if m.id in seen:
            return []
        seen[m.id] = m
        out = [m]
        read[m.id] = attrs = st.heap.get(m.id)
        for name, v in (attrs or {}).items():
            if name in ("<layers>", "<elems>") or not name.startswith("<"):
                for a in self.flat_objects(v, st, read=read):
                    if a.kind == "module":
                        out.extend(self._submodules(a, st, seen, read))
        return out

    def flat_objects(self, v, st, depth=0, read=None):
        """The modules in `v`, also inside its lists, dicts and tuples (`read`: where the
        heap entries of the containers gone through are noted)."""
        for a in v:
            if isinstance(a, Obj) and a.kind == "module":
                yield a
            elif isinstance(a, Obj) and a.kind in ("list", "dict") and depth < 2:
                if read is not None:
                    read[a.id] = st.heap.get(a.id)
                yield from self.flat_objects(st.get_attr(a.id, "<elems>") or EMPTY, st, depth + 1, read)
            elif isinstance(a, Tup) and depth < 3:
                for item in a.items:
                    yield from self.flat_objects(item, st, depth + 1, read)

    @staticmethod
    def is_module_ref(base) -> bool:
        """Whether a base class is a torch.nn module class (`nn.Module`, `nn.Linear`)."""
        return isinstance(base, Ref) and base.dotted.startswith(("torch.nn.", "nn.")) and \
            K.module_info(base.dotted) is not None

    def library_layer(self, base):
        """The torch.nn class a project's class derives from directly, when the engine knows
        what it computes (`nn.Linear`, `nn.Sequential`; not `nn.Module`)."""
        if not self.is_module_ref(base):
            return None
        name = base.dotted.rsplit(".", 1)[-1]
        info = K.module_info(name)
        return name if info.op or info.container or info.has_params else None

    def library_base(self, cls_id, st, seen=None):
        """The torch.nn class (see `library_layer`) first found among a class's bases or theirs."""
        seen = (seen or set()) | {cls_id}
        for base in self.bases_of(cls_id, st):
            if (layer := self.library_layer(base)) is not None:
                return layer
            if isinstance(base, Obj) and base.kind == "class" and base.id not in seen:
                if (layer := self.library_base(base.id, st, seen)) is not None:
                    return layer
        return None

    def builtin_info(self, m: Obj):
        """What the knowledge says of a torch.nn module's class; None for a local or unseen one."""
        kind = self.cx.module_kind.get(m.id)
        return K.module_info(kind) if kind not in (None, "local", "opaque") else None

    def has_parameters(self, m: Obj, st) -> bool:
        """Whether the module (or one of its submodules) has parameters of its own."""
        for x in self.submodules(m, st):
            info = self.builtin_info(x)
            if self.cx.module_kind.get(x.id) == "opaque" or (info is not None and info.has_params):
                return True
            for v in (st.heap.get(x.id) or {}).values():
                t = tensor_of(v)
                if t is not None and any(o[0] == "params" for o in t.objs):
                    return True
        return False

    def module_rg(self, m: Obj, st, name=None):
        """Whether the parameters of `m` (the one called `name`) require grad: True or False
        when all surely do or surely do not, else None.  `<rg>` is the flag of those whose own
        was not set one by one (`param_flags`); a built-in layer's are known by name."""
        flag = st.get_attr(m.id, "<rg>")
        base = True if flag is None else self.truth_of(flag)
        info = self.builtin_info(m)
        made = literal_of(st.get_attr(m.id, "<parameters>") or UNKNOWN, tuple)  # (`bias=False`: no bias)
        names = set(made) if made is not None else set(info.param_params) if info is not None else set()
        seen = set()
        for flags in self.param_flags(m.id, st):
            if flags is None:
                return None
            if name is not None:
                seen.add(flags.get(name, base))
            else:
                seen |= set(flags.values())
                if not names or not names <= flags.keys():
                    seen.add(base)
        return seen.pop() if len(seen) == 1 else None

    def param_value(self, m: Obj, st, subtree=False, name=None):
        """The parameters of `m` (and of its submodules, or the one called `name`) as one tensor."""
        if name is not None:
            return frozenset({replace(tensor_of(self.param_value(m, st)), rg=self.module_rg(m, st, name),
                                      ident=("param", m.id, name))})
        mods = self.submodules(m, st) if subtree else [m]
        rgs = [self.module_rg(x, st) for x in mods]
        rg = True if all(r is True for r in rgs) else (False if all(r is False for r in rgs) else None)
        cut = frozenset(self.cx.frozen_by[x.id] for x in mods if x.id in self.cx.frozen_by) if rg is False else frozenset()
        made = [st.get_attr(x.id, "<inference>") for x in mods]  # see convert_module
        inference = made[0] if all(v is not None and len(v) == 1 and NONE.isdisjoint(v) for v in made) else None
        return frozenset({Tensor(rg=rg, leaf=True, objs=frozenset(("params", x.id) for x in mods), cut=cut,
                                 deps=frozenset(), inference=next(iter(inference)).value if inference else None)})

    def buffer_value(self, m: Obj) -> frozenset:
        """The buffers of a built-in module (BatchNorm's running statistics): one storage here."""
        return frozenset({Tensor(rg=False, leaf=True, objs=frozenset({("buffers", m.id)}), deps=frozenset())})

    def buffers(self, m: Obj, st) -> list:
        """Each buffer of `m` and its submodules: built-in ones and those registered by name."""
        out = []
        for x in self.submodules(m, st):
            info = self.builtin_info(x)
            if info is not None and info.buffer_params:
                out.append(self.buffer_value(x))
            registered = self.registered_buffers(x, st)
            out.extend(registered if registered is not None else [UNKNOWN])
        return out

    @staticmethod
    def patch_library(base, name, v, st) -> None:
        """`setattr(torch, "zeros", wrapped)`, `torch.zeros = wrapped` (a zero.Init-style context
        casting new tensors): later reads of `torch.zeros` give `v`, until it is set back."""
        refs = [a for a in base if isinstance(a, Ref)]
        for ref in refs:
            st.heap.setdefault(PATCHED, {})
            st.set_attr(PATCHED, ref.dotted + "." + name, v, strong=len(base) == 1)

    def in_new_thread(self, how, args, kwargs, st, node):
        """`pool.submit(fn, *args, **kwargs)` (`pool.map(fn, items)`): `fn` runs on a worker thread,
        in torch's default modes there (grad on, no inference mode); its effects are seen by
        the time the caller reads the future, and the future's value is not known."""
        saved = st.grad
        st.grad = True
        self.cx.inference_sites.append(None)
        try:
            if how == "submit":
                self.call_value(args[0], list(args[1:]), dict(kwargs), st, node)
            elif len(args) == 2 and not kwargs:
                self.call_value(args[0], [self.iter_elements(args[1], st)], {}, st, node)
        finally:
            self.cx.inference_sites.pop()
            st.grad = saved
        return UNKNOWN

    def state_dict(self, m: Obj, st, node):
        """`m.state_dict()`: its parameters and buffers detached (`keep_vars=False`), by name when
        every one is known and it has no buffers, else under keys not known."""
        named, buffers = self.named_parameters(m, st), self.buffers(m, st)
        if named is None or buffers:
            named = [(None, join_all([self.param_value(m, st, subtree=True), *buffers]))]
        return self.new_dict(node, [const(k) if k is not None else UNKNOWN for k, _ in named],
                             [self.tensor_method(v, "detach", [], {}, st, node) for _, v in named], st)

    def reparametrize(self, spec, args, kwargs, st):
        """`weight_norm(layer)`, `register_parametrization(layer, "weight", P())`: the module
        itself, its attribute now computed on each read (see `module_attribute`)."""
        position, keyword, default = spec
        given = kwargs.get(keyword, args[position] if len(args) > position else None)
        name = literal_of(given, str) if given is not None else default
        for m in objs_of(args[0], "module"):
            st.set_attr(m.id, REPARAMETRIZED, const(name) if name is not None else UNKNOWN,
                        strong=len(args[0]) == 1)
        return args[0]

    def conv_forward(self, m: Obj, info, args, st, node):
        """`self._conv_forward(x, weight, bias)` in a subclass of a conv layer (a causal, masked or
        quantized conv): the layer's convolution of exactly the operands given, which are often
        not its own weights (`self.weight * self.mask`)."""
        op = info.op_info(inplace=False)
        if op is None:
            return UNKNOWN
        bound = dict(zip(tuple(info.input_params) + tuple(info.param_params), args))
        arg_nodes = list(zip(node.args, args))[:1] if isinstance(node, ast.Call) else []
        return self.op_result(node, op, bound, list(args), st, arg_nodes=arg_nodes)

    def set_module_item(self, m: Obj, key, v, st, strong: bool) -> None:
        """`losses["kd"] = KLDiv()`, `blocks[i] = block` on a ModuleDict, ModuleList or Sequential:
        stored as its constructor stores them (by name, among its layers; a list's item by its
        index when the layers are known one by one, else they no longer are)."""
        st.set_attr(m.id, "<layers>", join(st.get_attr(m.id, "<layers>") or EMPTY, v))
        items = st.get_attr(m.id, "<items>")
        (row,) = tuple(items) if items is not None and len(items) == 1 else (None,)
        if isinstance(key, int) and isinstance(row, Tup) and -len(row.items) <= key < len(row.items) and strong:
            replaced = list(row.items)
            replaced[key] = v
            st.set_attr(m.id, "<items>", frozenset({Tup(tuple(replaced))}))
            return
        st.set_attr(m.id, "<items>", UNKNOWN)
        keys = literal_of(st.get_attr(m.id, MODULE_KEYS) or UNKNOWN, tuple)
        if isinstance(key, str):  # `md["kd"]` and `md.kd`
            st.set_attr(m.id, item_attr(key), v, strong=strong)
            st.set_attr(m.id, key, v, strong=strong)
        st.set_attr(m.id, MODULE_KEYS, const(keys + (key,) if key not in keys else keys)
                    if isinstance(key, str) and keys is not None and strong else UNKNOWN)

    @staticmethod
    def module_dict_items(m: Obj, st) -> list | None:
        """A ModuleDict's (key, module) pairs, its keys in order, each with the module it holds
        now; None when it is no ModuleDict of known keys."""
        keys = literal_of(st.get_attr(m.id, MODULE_KEYS) or UNKNOWN, tuple)
        return [(k, st.get_attr(m.id, k) or UNKNOWN) for k in keys] if keys is not None else None

    def own_named_buffers(self, m: Obj, st):
        """`m.named_buffers()` as (name, tensor) pairs when they are all `m`'s own, registered by
        known names (a stateful layer resetting its states); None otherwise."""
        names = self.buffer_names(m, st)
        if names is None or len(self.buffers(m, st)) != len(names):  # (buffers of its submodules too)
            return None
        return list(zip((literal_of(n, str) for n in names), self.registered_buffers(m, st)))

    def registered_buffers(self, m: Obj, st):
        """The tensors `register_buffer` gave `m`, in order, as they are now (`self.v_mem = v`
        replaces a buffer's tensor), or None if not known one by one."""
        names = self.buffer_names(m, st)
        if names is None:
            return None
        return [st.get_attr(m.id, name) or UNKNOWN for name in (literal_of(n, str) for n in names)]

    def buffer_names(self, m: Obj, st) -> list | None:
        """The names `register_buffer` gave `m`'s buffers, in order; None when not known (a name
        not known, or code not followed that may have registered more)."""
        if st.get_attr(m.id, UNSEEN_ATTRS) is not None:
            return None
        return self.exact_items(st.get_attr(m.id, "<buffers>") or frozenset({Tup(())}), st)

    def registry_slot(self, node: ast.Subscript, st, registries=("_parameters", "_buffers", "_modules")) \
            -> tuple | None:
        """(module, name) when `node` is `m._parameters[name]` (or `_buffers`, `_modules`) on one
        module and a known name: the dicts torch keeps a module's parameters, buffers and children
        in, which `m.name` reads (`model._modules["avgpool"]`).  Weight dropout and hand-made
        replicas fill `_parameters` with computed tensors (and `parameters()` then yields them)."""
        if not isinstance(node.value, ast.Attribute) or node.value.attr not in registries:
            return None
        owner = self.eval(node.value.value, st)
        name = literal_of(self.eval(node.slice, st), str)
        if name is None or len(owner) != 1 or not objs_of(owner, "module"):
            return None
        return next(iter(owner)), name

    def set_parameter_slot(self, m: Obj, name: str, v, st, node) -> None:
        """`m._parameters[name] = v`: `m.name` is `v` from now on, and so is that parameter in
        `m.parameters()`, a computed tensor as much as a Parameter."""
        self.set_attribute(frozenset({m}), name, v, st, node)
        st.set_attr(m.id, SLOTS, const(tuple(dict.fromkeys([*self.slots(m, st), name]))))

    def delete_parameter_slot(self, m: Obj, name: str, st) -> None:
        """`del m._parameters[name]`: no longer a parameter of `m` (nor set through `_parameters`);
        what `m.name` reads now is not known (a plain attribute may be set in its place)."""
        st.set_attr(m.id, SLOTS, const(tuple(n for n in self.slots(m, st) if n != name)))
        names = literal_of(st.get_attr(m.id, "<parameters>") or UNKNOWN, tuple)
        if names is not None:
            st.set_attr(m.id, "<parameters>", const(tuple(n for n in names if n != name)))
        st.set_attr(m.id, name, UNKNOWN)

    @staticmethod
    def slots(m: Obj, st) -> tuple:
        """The names `m._parameters[name] = v` has set (see `set_parameter_slot`)."""
        return literal_of(st.get_attr(m.id, SLOTS) or UNKNOWN, tuple) or ()

    def module_attribute(self, m: Obj, name, st, node):
        out = self.plain_module_attribute(m, name, st, node)
        t = tensor_of(out)
        if st.get_attr(m.id, REPARAMETRIZED) == const(name) and st.grad is True and t is not None and t.rg is True \
                and len(out) == 1:  # computed from the parametrization's own parameters on each read
            return frozenset({replace(t, leaf=False, ident=None)})
        return out

    def plain_module_attribute(self, m: Obj, name, st, node):
        if name == "__getattr__":  # `self.__getattr__(f"rcu{i}")`: nn.Module's own, which reads as getattr
            return frozenset({Partial(frozenset({Ref("builtins.getattr")}), (frozenset({m}),), ())})
        kind = self.cx.module_kind.get(m.id)
        if name in self.slots(m, st):
            return st.get_attr(m.id, name) or UNKNOWN
        if name in ("weight", "bias") or name.startswith(("weight_", "bias_")) or name in ("in_proj_weight",):
            return self.param_value(m, st, name=name)
        if name in ("parameters", "named_parameters", "modules", "children", "named_modules", "named_children",
                    "zero_grad", "train", "eval", "to", "cuda", "cpu", "float", "double", "half", "bfloat16",
                    "requires_grad_", "register_buffer", "register_parameter", "add_module", "register_module",
                    "state_dict", "load_state_dict", "apply", "forward", "__call__", "extra_repr", "get_submodule",
                    "buffers", "named_buffers", "append", "extend", "insert", "register_forward_hook",
                    "register_forward_pre_hook"):
            return frozenset({Method(frozenset({m}), name)})
        if name in ("items", "keys", "values") and st.get_attr(m.id, MODULE_KEYS) is not None:
            return frozenset({Method(frozenset({m}), name)})  # a ModuleDict's
        info = self.builtin_info(m)
        if name == "_conv_forward" and info is not None and info.op == "convolution":
            return frozenset({Method(frozenset({m}), name)})  # what a subclass's `forward` calls
        if kind == "local" or m.id in self.cx.obj_class or info is not None and info.op is not None and not info.container:
            return UNKNOWN  # a layer that is one op (nn.Linear) has no submodule to find here
        layers = self.exact_items(frozenset({m}), st) if name.isdigit() and kind in ("Sequential", "ModuleList") \
            else None
        if layers is not None and int(name) < len(layers):
            return layers[int(name)]  # `getattr(seq, "1")`, `seq._modules["1"]`: the layer it holds at that place
        sub = Obj(("sub", m.id, name), "module")
        self.cx.module_kind.setdefault(sub.id, "opaque")
        if sub.id not in st.heap:
            st.set_attr(m.id, name, frozenset({sub}))
            st.heap.setdefault(sub.id, self.no_hooks({}))
        return frozenset({sub})

    def module_method(self, m: Obj, name, args, kwargs, st, node, strong=False):
        info = self.builtin_info(m)
        container = info is not None and info.container
        if name == "register_module":  # torch's alias of add_module
            name = "add_module"
        if container and (name in ("append", "extend", "insert") or (name == "add_module" and len(args) >= 2)):
            self.name_layer(m, name, args, st)
            self.grow(m, name if name != "add_module" else "append", args[-1:] if name == "add_module" else args,
                      st, strong, "<layers>")
            if name != "add_module":
                return frozenset({m})
        if name == "_conv_forward" and len(args) >= 2 and not kwargs:
            return self.conv_forward(m, info, args, st, node)
        if name in ("parameters", "named_parameters") and (args or kwargs):
            # `recurse=False`: the module's own, named without a dot; other options: not known (none, perhaps)
            flag = kwargs.get("recurse", args[0] if name == "parameters" and args else None)
            named = self.named_parameters(m, st) if flag is not None and self.truth_of(flag) is False \
                and set(kwargs) <= {"recurse"} and len(args) <= (name == "parameters") else None
            if named is not None:
                own = [(n, v) for n, v in named if "." not in n]
                return self.known_sequence([v if name == "parameters" else frozenset({Tup((const(n), v))})
                                            for n, v in own], st, node)
            value = self.param_value(m, st, subtree=True)
            return self.make_sequence(value if name == "parameters" else frozenset({Tup((UNKNOWN, value))}), st, node)
        if name == "parameters" and not args and not kwargs:
            # each one, when they are known one by one and few (`[p.detach() for p in net.parameters()]` zipped
            # with their names), or some are tensors set into `_parameters` (one of them may be no leaf)
            named = self.named_parameters(m, st)
            slotted = any(self.slots(x, st) for x in self.submodules(m, st))
            if named is not None and (len(named) <= MAX_EXACT_PARAMETERS or slotted):
                return self.known_sequence([v for _, v in named], st, node)
            if slotted:
                return self.make_sequence(UNKNOWN, st, node)
        if name == "parameters":
            out = self.make_sequence(self.param_value(m, st, subtree=True), st, node, nonempty=True)
            self.contains(out, frozenset(("params", x.id) for x in self.trainable_layers(m, st)), st)
            return out
        if name == "buffers":
            if any(self.cx.module_kind.get(x.id) == "opaque" for x in self.submodules(m, st)):
                return self.make_sequence(UNKNOWN, st, node)  # buffers the engine cannot see
            items = self.buffers(m, st)
            return self.known_sequence(items, st, node)
        if name == "named_buffers" and not args and not kwargs:
            named = self.own_named_buffers(m, st)
            return self.known_sequence([frozenset({Tup((const(n), v))}) for n, v in named], st, node) \
                if named is not None else self.make_sequence(UNKNOWN, st, node)
        if name == "state_dict" and not args and not kwargs:
            return self.state_dict(m, st, node)
        if name == "named_parameters":  # (without options: see above)
            named = self.named_parameters(m, st)
            if named is not None:  # each one known, with its name: a loop over them runs on each
                vals = [frozenset({Tup((const(n), v))}) for n, v in named]
                return self.known_sequence(vals, st, node)
            return self.make_sequence(frozenset({Tup((UNKNOWN, self.param_value(m, st, subtree=True)))}), st, node,
                                      nonempty=True)
        if name in ("items", "keys", "values") and not args and (pairs := self.module_dict_items(m, st)) is not None:
            vals = [const(k) if name == "keys" else v if name == "values" else frozenset({Tup((const(k), v))})
                    for k, v in pairs]
            return self.known_sequence(vals, st, node)
        if name == "get_submodule" and len(args) == 1 and not kwargs:  # `model.get_submodule("blocks.3.conv")`
            path = literal_of(args[0], str)
            found = dict(self.named_modules(m, st) or ()).get(path) if path is not None else None
            return frozenset({found}) if found is not None else UNKNOWN
        if name in ("modules", "children", "named_modules", "named_children"):
            named = self.named_children(m, st) if name.endswith("children") else self.named_modules(m, st)
            if named is not None:  # each one known, with its name: a loop over them runs on each
                vals = [frozenset({Tup((const(n), frozenset({x})))}) if name.startswith("named_") else frozenset({x})
                        for n, x in named]
                return self.known_sequence(vals, st, node)
            mods = self.submodules(m, st)
            if name in ("children", "named_children"):
                mods = mods[1:]
            vals = [frozenset({x}) for x in mods]
            if name.startswith("named_"):
                vals = [frozenset({Tup((UNKNOWN, v))}) for v in vals]
            return self.known_sequence(vals, st, node)
        if name == "zero_grad":
            self.note_event("zero_grad", node)
            self.clears_grads(kwargs, st, frozenset(("params", x.id) for x in self.submodules(m, st)))
            return NONE
        if name == "requires_grad_":
            flag = self.truth_of(args[0] if args else kwargs.get("requires_grad", const(True)))
            for x in self.submodules(m, st):
                # each parameter's `requires_grad_(flag)`: a computed tensor set into `_parameters`
                # (a hook's `m._parameters[name] = w`) refuses to have grad turned off
                owner = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
                for slot in self.slots(x, st):
                    self.set_requires_grad(node, owner, sure_tensor(st.get_attr(x.id, slot) or UNKNOWN), flag,
                                           setter=False, member=owner is not None)
                self.set_module_rg(x.id, const(flag) if flag is not None else UNKNOWN, st)
            return frozenset({m})
        if name in ("train", "eval"):  # `self.training`, read in forward
            flag = False if name == "eval" else self.truth_of(args[0] if args else kwargs.get("mode", const(True)))
            self.set_training(m, const(flag) if flag is not None else UNKNOWN, st, strong, node, {m.id})
            return frozenset({m})
        if name == "load_state_dict":
            self.load_state(m, args, kwargs, st, node)
            return UNKNOWN
        if name in ("to", "float", "double", "half", "bfloat16"):
            self.convert_module(m, name, args, kwargs, st, strong)
            return frozenset({m})
        if name in ("cuda", "cpu", "apply"):
            return frozenset({m})
        if name == "register_buffer" and len(args) >= 2:
            persistent = kwargs.get("persistent", args[2] if len(args) > 2 else const(True))
            if self.truth_of(persistent) is not True:  # not in the state dict: `load_state_dict` leaves it
                st.set_attr(m.id, "<transient buffers>", const(True))
            names = self.buffer_names(m, st)
            key = literal_of(args[0], str)
            if names is None or key is None:
                st.set_attr(m.id, "<buffers>", UNKNOWN)
            elif key not in (literal_of(n, str) for n in names):  # (registered again: replaced in its place)
                st.set_attr(m.id, "<buffers>", frozenset({Tup((*names, args[0]))}))
        if name in ("register_buffer", "register_parameter", "add_module") and len(args) >= 2 \
                and (key := literal_of(args[0], str)) is not None:  # (a name a loop over a list gives too)
            self.set_attribute(frozenset({m}), key, args[1], st, node)
            return NONE
        if name in REGISTER:
            return self.register_module_hook(m, name, args, kwargs, st, node, strong)
        if name == "forward":
            return self.module_call(m, args, kwargs, st, node)
        if name == "__call__":
            return self.hooked_call(m, args, kwargs, st, node, lambda xs: self.module_call(m, xs, kwargs, st, node))
        return UNKNOWN

    def set_training(self, m: Obj, mode, st, strong, node, seen: set) -> None:
        """`Module.train(mode)`: the module's flag, then each child's own `train(mode)`, which a
        class may override (to drop a cache computed in eval mode); every submodule's flag when
        the children are not known one by one."""
        def flag(x):
            st.set_attr(x.id, "training", mode if strong else join(st.get_attr(x.id, "training") or UNKNOWN, mode))
        flag(m)
        children = self.named_children(m, st)
        if children is None:
            for x in self.submodules(m, st)[1:]:
                flag(x)
            return
        for _, x in children:
            if x.id in seen:
                continue
            seen.add(x.id)
            override = self.class_lookup(self.cx.obj_class[x.id], "train", st) if x.id in self.cx.obj_class else None
            if override is not None:
                self.call_value(self.bind_class_member(override, x, st, node), [mode], {}, st, node)
            else:
                self.set_training(x, mode, st, strong, node, seen)

    def load_state(self, m: Obj, args, kwargs, st, node):
        """`module.load_state_dict(sd)` copies into every parameter and buffer in place (under
        no_grad): a graph that saved one of them before can no longer be backpropagated.  With
        `strict` (the default) every one of them is surely written; `assign=True` replaces them."""
        def flag(name, pos, default):
            v = kwargs.get(name, args[pos] if len(args) > pos else None)
            return default if v is None else self.truth_of(v)
        if flag("assign", 2, False) is not False:
            return
        objs = frozenset(("params", x.id) for x in self.submodules(m, st)) | \
            frozenset(o for b in self.buffers(m, st) if (t := tensor_of(b)) is not None for o in t.objs)
        strict = flag("strict", 1, True) is True
        self.version_bump(node, objs, st, objs if strict else frozenset())
        for x in self.submodules(m, st) if strict else ():  # each written in place: an inference tensor refuses
            saved = [] if st.get_attr(x.id, "<transient buffers>") else self.registered_buffers(x, st) or []
            for v in [self.param_value(x, st), *saved]:  # (a buffer not in the state dict is not written)
                self.inplace_inference(node, None, v)

    def convert_module(self, m: Obj, name, args, kwargs, st, strong):
        """`model.to(torch.bfloat16)`, `model.half()`: each layer's parameters get the dtype.  A layer
        whose dtype surely changes inside inference mode gets new parameter data made there: from
        then on its parameters are inference tensors (`<inference>`: where they were made)."""
        target = self.converted_dtype(name, args, kwargs)
        if target is None and name == "to" and not args and "dtype" not in kwargs:
            return  # `model.to(device=...)`: no dtype given
        site = self.inference_site()
        for x in self.submodules(m, st):
            current = st.get_attr(x.id, "<dtype>")
            if current is None:
                continue
            if site is not None and target is not None and literal_of(current, str) not in (None, target):
                made = frozenset({Const(site)})
                st.set_attr(x.id, "<inference>", made if strong else join(
                    st.get_attr(x.id, "<inference>") or NONE, made))
            dtype = const(target) if target is not None else UNKNOWN
            st.set_attr(x.id, "<dtype>", dtype if strong else join(current, dtype))

    def setattr_call(self, obj, attr, name, v, st, node):
        """`setattr(obj, name, v)`.  With `attr`, the name known, an assignment; with one of
        several known names (a loop's iterations joined), each may be the one set; with a name
        not known, any attribute may be (and any frozen module may now hold `v`, on an object not
        known: `model.get_submodule(...)`)."""
        if attr is not None:
            self.set_attribute(obj, attr, v, st, node)  # (a library function replaced too: `patch_library`)
            return NONE
        unknown = any(isinstance(a, Unknown) for a in obj)
        names = None if unknown or not name or not all(isinstance(a, Const) and isinstance(a.value, str)
                                                       for a in name) else sorted({a.value for a in name})
        if unknown:
            self.may_thaw([Obj(i, "module") for i in self.cx.frozen_by], st)
        for o in objs_of(obj):
            if names is None:
                st.set_attr(o.id, UNSEEN_ATTRS, const(True))
            elif o.kind == "module" and tensor_of(v) is not None:
                st.set_attr(o.id, "<rg>", UNKNOWN)  # a parameter, perhaps
            for n in names if names is not None else [n for n in st.heap.get(o.id) or () if not n.startswith("<")]:
                st.set_attr(o.id, n, v, strong=False)  # it may be the one replaced
            self.may_thaw([o] if o.kind == "module" else [], st)
        return NONE

    def checkpoint(self, args, kwargs, st, node):
        """`checkpoint(function, *args, use_reentrant=...)`: the function's call.  A reentrant one
        runs it under no_grad, and its outputs require grad only if a tensor argument does: with
        none that surely does, they have no graph (cut at the checkpoint); otherwise the call is
        followed as it is."""
        spec = K.CHECKPOINT
        passed = {k: v for k, v in kwargs.items() if k not in spec.own_keywords}
        fn, inputs = args[0], list(args[1:])
        flag = kwargs.get(spec.reentrant_keyword)
        reentrant = spec.reentrant_default if flag is None or flag == NONE else self.truth_of(flag)
        def graph_free(a):  # a tensor surely without grad, or a number
            t = tensor_of(a)
            return t.rg is False and len(a) == 1 if t is not None else isinstance(next(iter(a), None), (Const, Num))
        if reentrant is not True or st.grad is not True or self.cx.unknown_spread is node \
                or not all(graph_free(a) for a in inputs):
            return self.call_value(fn, inputs, passed, st, node)
        st.grad = False
        self.cx.no_grad_sites.append(node)
        try:
            return self.call_value(fn, inputs, passed, st, node)
        finally:
            self.cx.no_grad_sites.pop()
            st.grad = True

    def namedtuple_type(self, names, defaults, st):
        """`collections.namedtuple(name, names)`: its fields from a string (`"v i"`, `"v, i"`) or
        a list of strings; unknown when they are not known one by one."""
        text = literal_of(names, str)
        if text is not None:
            fields = tuple(text.replace(",", " ").split())
        else:
            items = self.exact_items(names, st) if len(names) == 1 else None
            fields = tuple(literal_of(i, str) for i in items) if items is not None else ()
        if not fields or None in fields or not all(f.isidentifier() for f in fields):
            return UNKNOWN
        given = () if defaults is None or defaults == NONE else self.exact_items(defaults, st)
        return frozenset({NamedTupleType(fields).with_defaults(given)})

    LAYER_NAMES = "<layer names>"  # a container's children's names, once one was added under a name of its own

    def name_layer(self, m: Obj, method: str, args, st) -> None:
        """A container grows: `add_module("conv0", layer)` names the layer `conv0` (torch's
        `named_parameters` says `cnn.conv0.weight`, not `cnn.0.weight`), `append` by its position;
        `extend` or `insert` on one whose names are kept, or a name not known, leaves them not known."""
        names = st.get_attr(m.id, self.LAYER_NAMES)
        layers = self.exact_items(frozenset({m}), st)
        key = literal_of(args[0], str) if method == "add_module" else \
            str(len(layers)) if method == "append" and layers is not None else None
        if names is None and (method != "add_module" or layers is not None and key == str(len(layers))):
            return  # named by its position, as every layer so far
        known = literal_of(names, tuple) if names is not None else \
            tuple(str(i) for i in range(len(layers))) if layers is not None else None
        new = known + (key,) if known is not None and key is not None else None
        st.set_attr(m.id, self.LAYER_NAMES, const(new) if new is not None else UNKNOWN)

    def named_children(self, m: Obj, st) -> list | None:
        """`m.named_children()` as torch gives it: each module held by an attribute (a
        container's layers, named by position), in the order they were set, once each; None
        when one is not known (an attribute that may be a module or something else, one set
        by a call not followed, a module the engine cannot see into)."""
        if self.cx.module_kind.get(m.id, "opaque") == "opaque":
            return None
        info = self.builtin_info(m)
        pairs = self.module_dict_items(m, st)  # a ModuleDict's by key
        if pairs is None and info is not None and info.container:
            layers = self.exact_items(frozenset({m}), st)
            names = st.get_attr(m.id, self.LAYER_NAMES)
            given = literal_of(names, tuple) if names is not None else None
            if names is not None and (given is None or layers is None or len(given) != len(layers)):
                return None
            pairs = [(given[i] if given else str(i), v) for i, v in enumerate(layers)] if layers is not None else None
        elif pairs is None:
            attrs = st.heap.get(m.id) or {}
            if UNSEEN_ATTRS in attrs:
                return None
            pairs = [(n, v) for n, v in attrs.items() if not n.startswith("<")
                     and any(isinstance(a, Obj) and a.kind == "module" for a in v)]
        if pairs is None or any(len(v) != 1 for _, v in pairs):
            return None
        out, seen = [], set()
        for n, v in pairs:
            (x,) = v
            if not isinstance(x, Obj) or x.kind != "module":
                return None
            if x.id not in seen:
                seen.add(x.id)
                out.append((n, x))
        return out

    def layer_parameter_names(self, info, args, kwargs) -> tuple | None:
        """The names of a torch.nn layer's own parameters, for the layers whose parameters are
        the `weight` and `bias` its op takes (`bias=False`, `affine=False` drop them) and for
        recurrent layers (named by layer and direction); None when not known (a flag not known)."""
        if info.recurrent:
            if len(args) > 3:  # (the flags' positions differ between RNN and LSTM)
                return None
            layers = int_of(args[2] if len(args) > 2 else kwargs.get("num_layers", const(1)))
            flags = [self.truth_of(kwargs.get(k, const(d))) for k, d in (("bias", True), ("bidirectional", False))]
            proj = int_of(kwargs.get("proj_size", const(0)))
            if layers is None or None in flags or proj is None:
                return None
            return K.RECURRENT_PARAMETERS.names(layers, flags[0], flags[1], proj > 0)
        names = info.param_params if info.has_params and not info.container else ()
        if not set(names) <= {"weight", "bias"} or info.has_params and not names:
            return None  # (a layer with parameters its op does not take, `nn.MultiheadAttention`: not known)
        for flag, dropped in (("bias", {"bias"}), ("affine", set(names)), ("elementwise_affine", set(names))):
            if flag in kwargs:
                truth = self.truth_of(kwargs[flag])
                if truth is None:
                    return None
                names = names if truth else tuple(n for n in names if n not in dropped)
        return tuple(names)

    def named_parameters(self, m: Obj, st) -> list | None:
        """`m.named_parameters()`: each parameter with its path, each module's own in the order
        they were set; None when one is not known (see `named_modules`; a layer of torch whose
        parameters are not `weight` and `bias`, an attribute that may or may not be one)."""
        mods = self.named_modules(m, st)
        out = []
        for prefix, x in mods or ():
            slots = self.slots(x, st)
            if self.builtin_info(x) is not None:
                names = literal_of(st.get_attr(x.id, "<parameters>") or UNKNOWN, tuple)
                own = [(n, st.get_attr(x.id, n) if n in slots else self.param_value(x, st, name=n))
                       for n in names] if names is not None and set(slots) <= set(names) else None
            else:
                attrs = st.heap.get(x.id) or {}
                own = [(n, v) for n, v in attrs.items()
                       if not n.startswith("<") and (n in slots or self.parameter_of(x, v))]
                if any(len(v) != 1 for _, v in own):
                    own = None
            if own is None:
                return None
            out += [(f"{prefix}.{n}" if prefix else n, v) for n, v in own]
        return out if mods is not None else None

    @staticmethod
    def parameter_of(m: Obj, v) -> bool:
        """Whether the value of an attribute of `m` is (may be) one of its parameters."""
        return any(isinstance(a, Tensor) and ("params", m.id) in a.objs for a in v)

    def named_modules(self, m: Obj, st, prefix: str = "", seen: set | None = None) -> list | None:
        """`m.named_modules()`: `m` and its submodules depth first, named by their paths, once
        each; None when a child is not known (see `named_children`)."""
        seen = seen if seen is not None else set()
        if m.id in seen:
            return []
        seen.add(m.id)
        out = [(prefix, m)]
        children = self.named_children(m, st)
        if children is None or len(seen) > MAX_FOLDED:
            return None
        for n, x in children:
            below = self.named_modules(x, st, f"{prefix}.{n}" if prefix else n, seen)
            if below is None:
                return None
            out.extend(below)
        return out

    def layer_weights(self, m: Obj, st):
        """The tensors a torch.nn layer's op takes as its parameters: its own, or those set into
        its `_parameters` in their place (weight dropout, `functional_call`)."""
        slots = self.slots(m, st)
        if not slots:
            return self.param_value(m, st, subtree=True)
        names = literal_of(st.get_attr(m.id, "<parameters>") or UNKNOWN, tuple)
        kept = [self.param_value(m, st, name=n) for n in names if n not in slots] if names is not None else \
            [self.param_value(m, st, subtree=True)]
        return self.all_of(kept + [st.get_attr(m.id, n) or UNKNOWN for n in slots])

    def functional_call(self, args, kwargs, st, node):
        """`torch.func.functional_call(model, {name: tensor}, args)`: the model's forward with
        those tensors in place of the parameters and buffers of those dotted names, which it
        keeps afterwards.  An unknown call unless every name is known and found."""
        if len(args) < 2 or len(args[0]) != 1 or not objs_of(args[0], "module"):
            return None
        m = next(iter(args[0]))
        dicts = [args[1]] if objs_of(args[1], "dict") else self.exact_items(args[1], st) or [UNKNOWN]
        pairs = [p for d in dicts for p in (self.dict_in_order(next(iter(d)), st) if len(d) == 1 and objs_of(d, "dict")
                                             else None) or [(None, None)]]
        modules = dict(self.named_modules(m, st) or ())
        places = [(modules.get(name.rpartition(".")[0]), name.rpartition(".")[2], v) for name, v in pairs
                  if isinstance(name, str)]
        if not modules or len(places) != len(pairs) or any(x is None for x, _, _ in places):
            return None
        saved = {x.id: st.heap.get(x.id) for x, _, _ in places}
        for x, attr, v in places:
            self.set_parameter_slot(x, attr, v, st, node)
        call_args = args[2] if len(args) > 2 else kwargs.get("args", frozenset({Tup(())}))
        items = self.exact_items(call_args, st) if is_sequence(call_args) else [call_args]
        try:
            return self.call_value(frozenset({m}), list(items) if items is not None else [UNKNOWN], {}, st, node)
        finally:
            for oid, attrs in saved.items():  # the module's own parameters again
                if attrs is not None:
                    st.heap[oid] = attrs

    def module_call(self, m: Obj, args, kwargs, st, node, sub=0, arg_nodes=None):
        kind = self.cx.module_kind.get(m.id, "opaque")
        info = self.builtin_info(m)
        x = args[0] if args else (next(iter(kwargs.values())) if kwargs else UNKNOWN)
        if info is not None and info.name in K.DROPOUTS.modules and st.get_attr(m.id, "training") == const(False):
            return x  # in eval mode a dropout layer returns its input itself
        if info is not None and info.returns_input and len(args) + len(kwargs) == 1:
            return x  # `nn.Identity()`: its input itself, a head left out by a config
        if info is not None and info.container:
            layers = self.exact_items(frozenset({m}), st)
            if layers is None:
                return self.generic_module(m, args, st, node, sub)
            out = x
            for i, layer in enumerate(layers):
                first = (node.args[:1] if isinstance(node, ast.Call) else []) if i == 0 and arg_nodes is None else \
                    (arg_nodes if i == 0 else [])
                out = self.call_layer(layer, [out], st, node, sub * 64 + i + 1, first)
            return out
        if info is not None and info.op:
            inplace = st.get_attr(m.id, "<inplace>") == const(True)
            op = info.op_info(inplace=inplace)
            if op is None:
                return self.generic_module(m, args, st, node, sub)
            if op.inplace:
                if m.id in self.cx.inplace_flags:  # where a fix can turn it off
                    self.cx.facts.inplace_flags[node] = self.cx.inplace_flags[m.id]
                return self.inplace(node, None, x, list(args[1:]), st, op)
            bound, inputs = {}, []
            input_params = info.input_params or tuple(p for p in op.params if p in op.tensor_params)[:1]
            for p, v in zip(input_params, args):
                if is_sequence(v):
                    items = self.exact_items(v, st)  # an LSTM's state `(h, c)`, or `tuple(h)`: both are inputs
                    v = self.all_of(items) if items else self.iter_elements(v, st)
                bound[p] = v
                inputs.append(v)
            modules = ()
            if st.get_attr(m.id, "<renorms>") == const(True):  # `Embedding(max_norm=...)`: its rows renormed in place
                self.version_bump(node, frozenset({("params", m.id)}), st, frozenset({("params", m.id)}))
            if info.has_params:
                pv = self.layer_weights(m, st)
                for p in info.param_params:
                    bound[p] = pv
                inputs.append(pv)
                modules = {m.id}
            for p in info.buffer_params:
                bound[p] = self.buffer_value(m)
            if arg_nodes is None:
                arg_nodes = list(node.args) if isinstance(node, ast.Call) else []
            arg_list = list(zip(arg_nodes, args))
            out = self.with_shape(self.op_result(node, op, bound, inputs, st, sub=sub, arg_nodes=arg_list[:1],
                                                 modules=modules),
                                  self.layer_shape(m, kind, args, st, extra=len(args) > 1 or bool(getattr(
                                      node, "keywords", None))))
            if op.name.split(".")[-1] in K.LOSS_SHAPES and shape_of(out) != ():  # `nn.MSELoss(reduction="none")`
                self.cx.facts.unreduced.add(gid(node))
            return self.module_outputs(kind, info, op, out)
        out = self.generic_module(m, args, st, node, sub, arg_nodes)
        if kind in K.LAYER_SHAPES.get("keep_shape", ()) and args:
            out = self.with_shape(out, shape_of(args[0]))
        if m.id[0] == "sub" and kind == "opaque":
            # An attribute of a module the engine cannot see, called: a submodule's forward, or a
            # method that may return anything else (`model.split_edges(edges)`): no must fact.
            return join(out, UNKNOWN)
        return out

    def module_outputs(self, kind, info, op, out):
        """What a recurrent module returns, every part carrying the call's graph: `nn.LSTM` gives
        `(output, (h, c))`, `nn.GRU` `(output, h)`, `nn.LSTMCell` `(h, c)` (`op.returns` counts them)."""
        n = len(op.returns)
        if not info.returns_tuple or n < 2:
            return out
        if kind.endswith("Cell"):
            return frozenset({Tup((out,) * n)})
        state = frozenset({Tup((out,) * (n - 1))}) if n > 2 else out
        return frozenset({Tup((out, state))})

    def call_layer(self, layer, args, st, node, sub, arg_nodes):
        """One layer of a Sequential: `arg_nodes` name the input only for the first layer."""
        def call(a, st):
            if isinstance(a, Obj) and a.kind == "module":
                if self.cx.obj_class.get(a.id) is not None:
                    return self.call_object(a, args, {}, st, node)
                return self.hooked_call(a, args, {}, st, node,
                                        lambda xs: self.module_call(a, xs, {}, st, node, sub, arg_nodes))
            return self.call_value(frozenset({a}), args, {}, st, node)
        return self.alternatives(layer, st, call)

    def generic_module(self, m, args, st, node, sub=0, arg_nodes=None):
        """A module whose computation is not known: it saves its inputs and its parameters."""
        pv = self.param_value(m, st, subtree=True)
        x = args[0] if args else UNKNOWN
        inputs = [a for a in args if tensor_of(a) is not None] + [pv]
        if arg_nodes is None:
            arg_nodes = list(node.args) if isinstance(node, ast.Call) else []
        arg_list = [(arg_nodes[0], x)] if arg_nodes else []
        return self.op_result(node, K.resolve("F.linear", method=False), {"input": x, "weight": pv, "bias": pv},
                              inputs, st, sub=sub, arg_nodes=arg_list, modules={m.id})

    # ----------------------------------------------------------------- optimizers and scalers
    def opaque_module(self, node, st):
        """A module whose class the engine cannot see: its calls save inputs and parameters."""
        obj = Obj(("obj", self.frame.ctx, gid(node)), "module")
        self.cx.module_kind[obj.id] = "opaque"
        st.heap.setdefault(obj.id, self.no_hooks({}))
        return frozenset({obj})

    def make_optimizer(self, args, kwargs, st, node):
        obj = Obj(("opt", self.frame.ctx, gid(node)), "optimizer")
        params = kwargs.get("params") or (args[0] if args else UNKNOWN)
        param_node = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "params"), None)
        self.optimizer_params_leaf(params, kwargs, st, node, param_node)
        grads = st.get_attr(GLOBALS, GRADS) or const(False)  # a backward before it may have left grads
        st.heap[obj.id] = {"<params>": params, GRADS: grads}
        return frozenset({obj})

    def grads_written(self, st):
        """A backward filled `.grad`: every optimizer's step() now changes its parameters."""
        st.set_attr(GLOBALS, GRADS, const(True))
        for oid, attrs in list(st.heap.items()):
            if GRADS in attrs and oid != GLOBALS:
                st.set_attr(oid, GRADS, const(True))

    def sure_grads(self, st) -> frozenset:
        """Storages of the leaves whose .grad is set on every path here."""
        v = st.get_attr(GLOBALS, SURE_GRADS) or const(frozenset())
        sets = [a.value for a in v if isinstance(a, Const)]
        return frozenset.intersection(*sets) if sets and len(sets) == len(v) else frozenset()

    def update_sure_grads(self, st, fn) -> None:
        v = st.get_attr(GLOBALS, SURE_GRADS) or const(frozenset())
        st.set_attr(GLOBALS, SURE_GRADS, frozenset(Const(fn(a.value)) for a in v if isinstance(a, Const)))

    def grads_cleared(self, opt, kwargs, st):
        """zero_grad() sets grads to None (set_to_none defaults to True): a step before the
        next backward skips every parameter."""
        if self.clears_grads(kwargs, st, self.optimizer_objs(st.get_attr(opt.id, "<params>") or EMPTY, st)) is True:
            st.set_attr(opt.id, GRADS, const(False))

    def clears_grads(self, kwargs, st, objs):
        """`zero_grad(set_to_none=...)` on the leaves `objs`: unless it surely keeps them (zeroed,
        set_to_none=False), their grads are no longer surely set.  Returns set_to_none."""
        flag = self.truth_of(kwargs["set_to_none"]) if "set_to_none" in kwargs else True
        if flag is not False:
            self.update_sure_grads(st, lambda sure: sure - objs)
        return flag

    def optimizer_objs(self, params, st, depth=0) -> frozenset:
        out = set()
        for a in params:
            if isinstance(a, Tensor):
                out |= a.objs
            elif isinstance(a, Obj) and a.kind in ("list", "dict", "generator") and depth < 3:
                out |= self.optimizer_objs(st.get_attr(a.id, "<elems>") or EMPTY, st, depth + 1)
                for name, v in (st.heap.get(a.id) or {}).items():
                    if is_item_attr(name):
                        out |= self.optimizer_objs(v, st, depth + 1)
            elif isinstance(a, Tup) and depth < 3:
                for item in a.items:
                    out |= self.optimizer_objs(item, st, depth + 1)
        return frozenset(out)

    def optimizer_method(self, opt, name, args, kwargs, st, node):
        if name in K.OPTIMIZER_STEP_METHODS:
            closure = kwargs.get("closure", args[0] if args else NONE)
            out = UNKNOWN
            if closure != NONE:  # `step(closure)`: every optimizer calls it first, grad mode on (LBFGS maybe again)
                outer, st.grad = st.grad, True
                try:
                    out = self.call_value(closure, [], {}, st, node)
                finally:
                    st.grad = outer
            self.optimizer_step(opt, st, node)
            return out
        if name in K.ZERO_GRAD_METHODS:
            self.note_event("zero_grad", node)
            self.grads_cleared(opt, kwargs, st)
            return NONE
        if name in K.PARAM_GROUP_METHODS and args:
            self.optimizer_params_leaf(args[0], kwargs, st, node, node.args[0] if node.args else None)
            st.set_attr(opt.id, "<params>", join(st.get_attr(opt.id, "<params>") or EMPTY, args[0]))
            return NONE
        return UNKNOWN

    def optimizer_step(self, opt, st, node):
        self.note_event("step", node)
        if st.get_attr(opt.id, GRADS) == const(False):
            self.cx.facts.steps.pop(self.key(node), None)
            return  # no parameter has a grad: step() changes nothing
        params = st.get_attr(opt.id, "<params>") or EMPTY
        objs = self.optimizer_objs(params, st)
        self.cx.facts.steps[self.key(node)] = Step(node, objs)
        # Modified for sure: the parameters whose grads are surely set (a backward surely reached them
        # since the last zero_grad), of a parameter list known to the last element.
        sure = objs & self.sure_grads(st) if self.known_params(params, st) else frozenset()
        self.version_bump(node, objs, st, sure)

    def known_params(self, params, st, depth=0) -> bool:
        """Whether a parameter collection holds nothing unknown (every element is a known tensor)."""
        for a in params:
            if isinstance(a, Unknown) or depth > 3:
                return False
            if isinstance(a, Obj) and a.kind in ("list", "dict", "generator"):
                if not self.known_params(st.get_attr(a.id, "<elems>") or UNKNOWN, st, depth + 1):
                    return False
            elif isinstance(a, Tup) and not all(self.known_params(i, st, depth + 1) for i in a.items):
                return False
        return True

    def scaler_method(self, scaler, name, args, kwargs, st, node):
        if name in K.BACKWARD_CALLS.passthrough_methods:
            return args[0] if args else UNKNOWN
        if name == "step" and args:
            for opt in objs_of(args[0], "optimizer"):
                self.optimizer_step(opt, st, node)
            return UNKNOWN
        return UNKNOWN
