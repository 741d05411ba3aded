"""Calls of the functions, methods and lambdas a program defines, analysed in place.

A call runs the callee's body with the caller's abstract arguments in a new `Frame`, under a
call string of the last `Limits.call_string` call sites, so that the graph regions of two
calls stay apart; what a function reads of its definer (its closure, its defaults, the
cells of its `nonlocal` names) is bound when it is defined.  Functions no code reached
are analysed too, with unknown arguments (`analyse_unreached`).
"""
from __future__ import annotations

import ast
from dataclasses import replace

from gradguard.engine import binder
from gradguard.engine.context import Frame
from gradguard.engine.state import YIELDED, State, join_states, maybe_unbound
from gradguard.engine.values import (
    EMPTY, NONE, UNKNOWN, UNSEEN_ATTRS, Func, Obj, Tup, const, graph_unknown, join, map_tensors, objs_of, tensor_of,
)
from gradguard.ids import gid

DEFAULT = "<default>"  # in a function's closure: a parameter's default, evaluated where it was defined
CELL = "<cell>"  # in a function's closure: the heap object holding a name it declares `nonlocal`


def _scope(func) -> tuple[frozenset, frozenset]:
    """(local names, names declared global/nonlocal) of a function, from its statements alone:
    assignment, loop, `with`, `except` and import targets, nested definitions.  Expressions
    are not walked (a walrus target is not seen as local), which keeps this cheap."""
    args = func.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    declared: set = set()
    if isinstance(func, ast.Lambda):
        return frozenset(names), frozenset()
    stack = list(func.body)
    while stack:
        node = stack.pop()
        targets = ()
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        for t in targets:
            names.update(_bound_names(t))
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            seq = getattr(node, field, None)
            if isinstance(seq, list):
                stack.extend(seq)
    return frozenset(names - declared), frozenset(declared)


def _bound_names(target):
    """Names an assignment target binds: `a`, `a, (b, *c)`; not `torch.x` nor `d[k]`."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            yield from _bound_names(t)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _walk_own(func):
    """The nodes of a function body, not descending into nested functions or classes."""
    stack = list(func.body) if isinstance(func.body, list) else [func.body]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            for d in getattr(node, "decorator_list", []):
                stack.append(d)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _is_generator(node) -> bool:
    if isinstance(node, ast.Lambda):
        return False
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _walk_own(node))


def _forwards(node) -> bool:
    """Whether a function only passes its arguments on: a lambda, or a def whose body is one
    `return` of a call (`lambda t, y: func(t, y)`, `def my_func(self, x): return self.net(x)`)."""
    if isinstance(node, ast.Lambda):
        return True
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call)


class Calls:
    """The interpreter's part that runs calls of the program's own functions (see the module)."""

    def analyse_unreached(self, st: State) -> None:
        """Functions no module-level code called and whose text has a sink: analyse them with
        unknown arguments (methods with `self` an instance made by running `__init__`)."""
        instances: dict = {}
        self.cx.caller_unknown = True
        for site in self.cx.sites:
            node, owner = site.node, site.owner
            if node in self.cx.analysed_funcs or not binder.function_has_sink(self.cx.lines, node):
                continue
            self_value = UNKNOWN
            if owner is not None:
                cls = self.class_of_node(owner)
                if cls is not None:
                    if owner not in instances:
                        instances[owner] = self.instantiate(cls, [], {}, st, owner, run_init=True,
                                                            ctx=("root", gid(owner)))
                    self_value = instances[owner]
            args = [self_value] if owner is not None else []
            self.call_function(Func(node), args, {}, st.copy(), node, root=True)

    def closure(self, func, st: State) -> tuple:
        """What a function defined in another reads of that one's locals, as they are when it is
        defined (`fn` in a decorator's `wrapper`): the names it does not bind and the enclosing
        function binds only once, so that their values cannot change before a call."""
        fr = self.frame
        # defaults are evaluated once, where the function is defined (`lambda x, p=p: f(x, p)` in a
        # loop; `conf=Config()`: one instance that every call without `conf` shares)
        a = func.args
        params = list(a.posonlyargs) + list(a.args)
        defaults = list(zip(params[len(params) - len(a.defaults):], a.defaults)) + \
            [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        if fr.is_module or fr.class_obj is not None or not st.env:
            return tuple((DEFAULT + p.arg, self.eval(d, st)) for p, d in defaults if isinstance(d, ast.Call))
        local = self.names_of(func)[0]
        free = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local
        once = self.bound_once(fr.func) | fr.closed_over  # (what the enclosing function itself closed over)
        return tuple((n, st.env[n]) for n in sorted(free) if n in st.env and n in once) + \
            tuple((DEFAULT + p.arg, self.eval(d, st) if isinstance(d, ast.Call) else self.literal(d, st))
                  for p, d in defaults) + self.cells(func, st)

    def cells(self, func, st: State) -> tuple:
        """The names `func` declares `nonlocal`, each moved into a heap object (a cell) that the
        enclosing function and every call of `func` read and write (a step counter a schedule
        closure keeps): `(CELL + name, the cell)`."""
        fr = self.frame
        names = sorted({n for node in func.body if isinstance(node, ast.Nonlocal) for n in node.names}) \
            if not isinstance(func, ast.Lambda) else []
        out = []
        for n in names:
            cell = fr.cells.get(n)
            if cell is None:
                cell = fr.cells[n] = Obj(("cell", fr.ctx, gid(fr.func), n), "cell")
                st.heap[cell.id] = {"value": st.env.get(n, UNKNOWN)}
            out.append((CELL + n, frozenset({cell})))
        return tuple(out)

    def bound_once(self, func) -> frozenset:
        """The names a function binds exactly once and not in a loop: its parameters, and names
        assigned, defined or imported once outside any loop (computed once per function)."""
        cached = self.cx.once_bound.get(func)
        if cached is None:
            counts: dict = {}
            args = func.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if a:
                    counts[a.arg] = counts.get(a.arg, 0) + 1
            stack = [(s, False) for s in (func.body if not isinstance(func, ast.Lambda) else [func.body])]
            while stack:
                node, looped = stack.pop()
                names = [node.id] if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) else \
                    [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else \
                    [(a.asname or a.name).split(".")[0] for a in node.names] if isinstance(node, (ast.Import,
                                                                                               ast.ImportFrom)) \
                    else []
                for n in names:
                    counts[n] = counts.get(n, 0) + (2 if looped else 1)
                inner = looped or isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.comprehension))
                stack.extend((c, inner) for c in ast.iter_child_nodes(node))
            cached = self.cx.once_bound[func] = frozenset(n for n, c in counts.items() if c == 1)
        return cached

    def names_of(self, func) -> tuple:
        """(local names, names declared global, is a generator) of a function, computed once."""
        cached = self.cx.func_names.get(func)
        if cached is None:
            local, glob = _scope(func)
            module = self.cx.defined_in.get(func)
            lines = self.cx.lines if module is None else module.lines
            text = "\n".join(lines[func.lineno - 1: getattr(func, "end_lineno", func.lineno)])
            cached = self.cx.func_names[func] = (local, glob, "yield" in text and _is_generator(func))
        return cached

    def call_function(self, func: Func, args, kwargs, st: State, call_node, root=False):
        node = func.node
        self.cx.analysed_funcs.add(node)
        depth = sum(1 for n in self.cx.active_calls if not _forwards(n))  # a forwarder adds no depth of its own
        # a function that calls itself by its name (`_flatten(x)` in `_flatten`, `self.gather(o)` in `gather`),
        # walking a nested value, is followed a few levels deep; one reached again another way is not (a module's
        # `forward` reached through an attribute that may hold the module itself or one of its children)
        called = getattr(call_node, "func", None)
        by_name = getattr(called, "id", getattr(called, "attr", None)) == getattr(node, "name", None)
        if self.cx.active_calls.count(node) >= (self.cx.limits.recursion if by_name else 1) or \
                depth >= self.cx.limits.call_depth or \
                (self.cx.budget < 0 and not root) or (self.cx.foreign_budget < 0 and node in self.cx.defined_in):
            # Not followed: its result is unknown (helpers like repackage_hidden detach), and so
            # are the attributes it may have given the objects it got (`self.clear()` making lists)
            # and the graphs of the tensors they hold (`self.reset_states()` detaching them in place);
            # a module's forward may run the hooks of its layers, and change what they hold too.
            given = objs_of(func.bound or EMPTY) + [o for v in [*args, *kwargs.values()] for o in objs_of(v)]
            hooked = self.hook_owners(st) if any(o.kind == "module" for o in given) else []
            for obj in given + hooked:
                if obj.kind in ("instance", "module"):
                    st.set_attr(obj.id, UNSEEN_ATTRS, const(True))
                for name, v in list((st.heap.get(obj.id) or {}).items()):
                    if obj.kind in ("instance", "module") and not name.startswith("<") or \
                            obj in hooked and obj.kind in ("dict", "list"):  # `feats[name] = output`
                        st.set_attr(obj.id, name, map_tensors(v, graph_unknown))
            self.may_thaw([m for v in [*args, *kwargs.values()] for m in self.flat_objects(v, st)], st)
            self.cx.not_followed = node
            return UNKNOWN
        if self.cx.frames and not root:
            ctx = (self.frame.ctx + (gid(call_node) if call_node is not None else None,))[-self.cx.limits.call_string:]
        else:
            ctx = (gid(node),)
        local, glob, generator = self.names_of(node)
        arg_nodes = [(k.value, kwargs[k.arg]) for k in getattr(call_node, "keywords", ()) if k.arg in kwargs]
        frame = Frame(node, ctx, names=(local, glob), module=self.cx.defined_in.get(node))
        frame.call_node = call_node
        frame.on_yield, self.cx.pending_yield = self.cx.pending_yield, None
        wrapped = func.mode != "keep"  # (a mode wrapping the function decides, not its own decorators)
        grad = func.mode if wrapped else self.cx.grad_funcs.get(node, st.grad)
        callee = State({}, st.heap, grad, st.statics, st.weak)
        fixed = {name[len(DEFAULT):]: v for name, v in func.closure if name.startswith(DEFAULT)}
        self.bind_params(node, args, kwargs, callee, frame, st, fixed)
        frame.cells = {name[len(CELL):]: next(iter(v)) for name, v in func.closure if name.startswith(CELL)}
        closure = [(name, v) for name, v in func.closure if not name.startswith((DEFAULT, CELL))]
        for name, v in closure:
            callee.env.setdefault(name, v)
        frame.closed_over = frozenset(name for name, _ in closure)
        # The caller's locals ride in the callee's heap, so that what the call frees or modifies
        # marks them too, path by path (a backward on one branch of the callee is no must fact).
        stash = ("<env>", len(self.cx.frames))
        callee.heap = st.heap  # shared: what the call writes, the caller has (defaults may have allocated)
        st.heap[stash] = st.env
        self.cx.frames.append(frame)
        self.cx.active_calls.append(node)
        no_grad = grad is False and (wrapped or self.cx.grad_funcs.get(node) is False)
        if no_grad:
            self.cx.no_grad_sites.append(node)
        inference = func.inference if wrapped else node in self.cx.inference_funcs
        if inference:
            self.cx.inference_sites.append(node)
        # the function runs whole on the path where it is the one called: its own ops are not
        # applied to one alternative of something else (see `alternatives`)
        several, self.cx.one_of_several = self.cx.one_of_several, False
        statement = self.cx.statement
        try:
            if isinstance(node, ast.Lambda):
                frame.ret = self.eval(node.body, callee)
                out = callee
            else:
                out = self.exec_block(node.body, callee)
                if out is not None:
                    frame.ret = join(frame.ret, NONE)
                out = join_states(out, frame.ret_state)
        finally:
            self.cx.active_calls.pop()
            self.cx.frames.pop()
            self.cx.statement = statement
            if no_grad:
                self.cx.no_grad_sites.pop()
            if inference:
                self.cx.inference_sites.pop()
            self.cx.one_of_several = several
        if out is None and frame.raised:  # every path of the call ended, one by a raise: so does the caller's
            self.frame.raised_at = self.frame.statement
        st.escape(frame.ret)  # a list the call returns outlives it
        if out is not None:
            st.env = dict(out.heap.pop(stash))
            st.heap = out.heap
            if out.grad != grad and node not in self.cx.grad_funcs and not wrapped:
                st.grad = out.grad  # `torch.set_grad_enabled(flag)` in a helper: the mode is global, it stays
        else:
            st.heap.pop(stash, None)
        if generator:  # surely not empty when every path that ends yielded (the marker is bound on all);
            # known item by item when every path yielded the same values, in order
            yielded = out.env.get(YIELDED) if out is not None and YIELDED not in maybe_unbound(out) else None
            (exact,) = tuple(yielded) if yielded and len(yielded) == 1 else (None,)
            return self.make_sequence(frame.yields, st, call_node, nonempty=yielded is not None,
                                      items=exact.items if isinstance(exact, Tup) else None)
        return self.call_region(func, args, arg_nodes, frame.ret, st, call_node) if frame.ret else UNKNOWN

    def call_region(self, func: Func, args, arg_nodes, ret, st, call_node):
        """Record the call itself as a (saving-nothing) region of its result, with its
        arguments: a fix can then cut a graph at `D(fake.detach())` in the caller instead
        of inside the shared `forward`."""
        t = tensor_of(ret)
        if t is None or t.rg is False or not isinstance(call_node, ast.Call):
            return ret
        if any(isinstance(a, ast.Starred) for a in call_node.args):
            return ret
        pairs = list(zip(call_node.args, args[len(args) - len(call_node.args):])) + arg_nodes
        carried = [(n, tensor_of(v).regions) for n, v in pairs if tensor_of(v) is not None]
        modules = {o.id for o in objs_of(func.bound or EMPTY, "module") if self.has_parameters(o, st)}
        rid = self.region_id(call_node, "call")
        self.region(rid, call_node, (), (), False, carried, modules, certain=t.rg is True)
        return map_tensors(ret, lambda x: replace(x, regions=x.regions | {rid}) if x.rg is not False else x)

    def bind_params(self, node, args, kwargs, st: State, frame: Frame, caller: State, fixed: dict) -> None:
        """The callee's parameters; `fixed`: defaults evaluated where the function was defined
        (those not in it, of a function defined at the top of a module, are read in the caller)."""
        a = node.args
        positional = list(a.posonlyargs) + list(a.args)
        defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        spread = self.cx.unknown_keywords is not None and self.cx.unknown_keywords is frame.call_node  # `f(**cfg)`

        def default(p, d):  # a parameter not given a value: its default, unless a `**cfg` may have given one
            if d is None or spread:
                return UNKNOWN
            return fixed[p.arg] if p.arg in fixed else self.literal(d, caller)
        for i, p in enumerate(positional):
            if i < len(args):
                v = args[i]
            elif p.arg in kwargs:
                v = kwargs.pop(p.arg)
            else:
                v = default(p, defaults[i])
            st.env[p.arg] = v
        if a.vararg:
            st.env[a.vararg.arg] = frozenset({Tup(tuple(args[len(positional):]))})
        for p, d in zip(a.kwonlyargs, a.kw_defaults):
            st.env[p.arg] = kwargs.pop(p.arg, None) or default(p, d)
        if a.kwarg:  # `**items`: a new dict of the keywords left, unless the call spread a dict not known
            st.env[a.kwarg.arg] = UNKNOWN if spread else self.new_dict(
                a.kwarg, [const(k) for k in kwargs], list(kwargs.values()), st, ctx=frame.ctx)
        if positional and args and self.cx.owner_of.get(node) is not None:
            frame.self_value = args[0]  # a method's `self`

    def literal(self, node, st):
        """A parameter default read where the function is called: constants, literal containers, names
        and lambdas (a call default was run where the function was defined, see `closure`)."""
        if isinstance(node, ast.Constant):  # as in an expression (`dropout=0.0` tested with `> 0`)
            return self.expr_Constant(node, st)
        if all(isinstance(n, (ast.Constant, ast.UnaryOp, ast.BinOp, ast.operator, ast.unaryop)) for n in ast.walk(node)):
            return self.eval(node, st)  # a constant expression: `sign=-1`, `scale=1 / 255`
        if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Name, ast.Attribute, ast.Lambda)) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict"):
            return self.eval(node, st)
        return UNKNOWN
