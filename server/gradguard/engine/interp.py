"""The flow engine: abstract interpretation of a module, statement by statement.

Python's control flow is structured, so the control-flow graph of a body is walked
through its statements: `if` joins its branches, `for`/`while` iterate their body to a
fixpoint over the back edge (with break/continue/else), `try` and `with` route their
states, `return`/`break`/`continue` divert states to the frame's or loop's exits.
Calls to functions, methods and properties defined in the file are analysed in place
with the caller's abstract arguments (a call-string context keeps their graph regions
apart), which is how a tensor cached on `self` in one method is followed into another.

The interpreter is assembled from parts, each a module of its own: calls of the program's
own functions (`calls`), imports (`imports`), expressions (`exprs`), torch's semantics
(`torch_sem`), context managers the program writes (`managers`); what they share while one
module runs is declared in `context.Context` (`self.cx`).  This file is about control flow:
statements, branches, loops, classes and the names they bind.
"""
from __future__ import annotations

import ast

from gradguard.engine.calls import Calls
from gradguard.engine.context import Context, Frame, line_now
from gradguard.engine.exprs import Expressions
from gradguard.engine.imports import Imports, ImportsTooSlow
from gradguard.engine.limits import Limits, TooComplex, few_unrolled, running
from gradguard.engine.managers import CONTEXTMANAGER, UserContexts
from gradguard.engine.state import ESCAPED, GLOBALS, MAYBE_UNBOUND, State, adopt_sure, join_states, maybe_unbound
from gradguard.engine.torch_sem import TorchSemantics
from gradguard.engine.values import (
    EMPTY, HELD, HELD_NOTHING, NONE, UNKNOWN, Func, GradMode, Obj, Ref, Tup, const, int_of, item_key, join, objs_of,
    tensor_of,
)
from gradguard.facts import Facts
from gradguard.ids import derived, gid

MODULE = Ref("torch.nn.Module")
MAX_MRO_DEPTH = 32  # classes between a class and `object`, far more than any real hierarchy


class Interpreter(Calls, Imports, Expressions, TorchSemantics, UserContexts):
    def __init__(self, source: str, tree: ast.Module, deadline: float | None = None, *, path: str = "<string>",
                 workspace=None, limits: Limits = Limits()):
        self.cx = Context(source, tree, deadline, path=path, workspace=workspace, limits=limits)

    # ----------------------------------------------------------------- driver
    def run(self) -> Facts:
        frame = Frame(None, (), is_module=True)
        st = State({}, {GLOBALS: {"__name__": const("__main__")}}, True, {ESCAPED: self.cx.escaped})
        self.cx.frames.append(frame)
        with running(self.cx.clock):
            end = self.exec_block(self.cx.tree.body, st)
            if end is not None or not frame.raised:  # (every path raised: what it never reached never runs)
                self.analyse_unreached(end if end is not None else st)
        self.cx.frames.pop()
        return self.cx.facts

    def line_now(self) -> int | None:
        """The line of the analysed file's statement being executed (see `context.line_now`)."""
        return line_now(self.cx.frames)

    def check_time(self):
        self.cx.budget -= 1
        if self.cx.frames and self.cx.frames[-1].module is not None:
            self.cx.foreign_budget -= 1
        self.cx.clock.tick()
        if self.cx.namespaces and self.cx.clock.work > self.cx.limits.import_work:
            raise ImportsTooSlow()

    @property
    def frame(self) -> Frame:
        return self.cx.frames[-1]

    def entry_call(self):
        """While code of an imported module runs: the call in the analysed file that led
        there (an error raised inside is reported at it); None in the analysed file's code."""
        if self.frame.module is None:
            return None
        for outer, inner in zip(reversed(self.cx.frames[:-1]), reversed(self.cx.frames[1:])):
            if outer.module is None:
                return inner.call_node
        return None

    @property
    def current_file(self) -> str:
        """The file whose code runs now: a workspace module's, or the one analysed."""
        return self.frame.module.path if self.frame.module is not None else self.cx.path

    def key(self, node) -> tuple:
        return (self.frame.ctx, gid(node))

    # ----------------------------------------------------------------- names
    def lookup(self, name: str, st: State):
        fr = self.frame
        if fr.class_obj is not None:
            v = st.get_attr(fr.class_obj.id, name)
            if v is not None:
                return v
        if name in fr.cells:  # `nonlocal`, or a local a nested function declares so
            return st.get_attr(fr.cells[name].id, "value") or UNKNOWN
        v = st.env.get(name)  # a local, or a comprehension's variable
        if v is not None:
            return self.imported(name, v, st, None) if self.reads_imports else v
        if not fr.is_module and name in fr.locals:
            return EMPTY
        v = self.global_value(name, st)
        return v if v is not None else self.builtin(name)

    def global_value(self, name: str, st: State):
        """The global `name` of this frame's module as it is now (what it imports read when it is
        used), None when not bound there."""
        v = st.get_attr(self.frame.globals, name)
        if v is not None and self.reads_imports:
            return self.imported(name, v, st, self.frame.globals)
        return v

    def bases_of(self, cls_id, st: State) -> list:
        """A class's bases in the order its class statement lists them (the order Python looks
        methods up in), those imported from a workspace module read from it now: a base class
        matters when a method or the class's kind is looked up, not when it is defined."""
        items = [frozenset().union(*x) for x in
                 zip(*(a.items for a in st.get_attr(cls_id, "<bases>") or EMPTY if isinstance(a, Tup)))]
        scope = self.cx.class_globals.get(cls_id)
        if self.cx.lazy and any(isinstance(b, Ref) and (scope, b) in self.cx.lazy for item in items for b in item):
            items = [frozenset().union(*(self.resolve_import(scope, b, st) or frozenset({b}) for b in item))
                     for item in items]
            st.set_attr(cls_id, "<bases>", frozenset({Tup(tuple(items))}))
        return [a for item in items for a in sorted(item, key=self.stable_key)]

    def stable_key(self, atom) -> tuple:
        """Orders the classes one base expression may be (`A if flag else B`) the same way in every run."""
        node = self.cx.class_nodes.get(atom.id) if isinstance(atom, Obj) else None
        return (node.lineno, node.col_offset, "") if node is not None else (0, 0, repr(atom))

    def mro(self, cls_id, st: State, depth: int = 0) -> list | None:
        """`type(obj).__mro__` of a class of the program: its C3 linearisation, a library base
        ending its own line; None where Python itself would refuse the bases."""
        if depth > MAX_MRO_DEPTH:
            return None
        bases = [MODULE if self.is_module_ref(b) and b.dotted.endswith(".Module") else b
                 for b in self.bases_of(cls_id, st)]
        lines = []
        for b in bases:  # a torch.nn layer is a Module
            line = self.mro(b.id, st, depth + 1) if isinstance(b, Obj) and b.kind == "class" else \
                [b, MODULE] if b != MODULE and self.is_module_ref(b) else [b]
            if line is None:
                return None
            lines.append(line)
        lines = [line for line in lines + [list(bases)] if line]
        out = [Obj(cls_id, "class")]
        while lines:
            head = next((line[0] for line in lines if not any(line[0] in other[1:] for other in lines)), None)
            if head is None:
                return None
            out.append(head)
            lines = [rest for line in lines if (rest := line[1:] if line[0] == head else line)]
        return out

    def bind(self, name: str, value, st: State) -> None:
        fr = self.frame
        if fr.class_obj is not None:
            st.set_attr(fr.class_obj.id, name, value)
        elif name in fr.cells:
            st.set_attr(fr.cells[name].id, "value", value)
        elif fr.is_module or name in fr.globals_declared:
            st.set_attr(fr.globals, name, value)
        else:
            st.env[name] = value
            if MAYBE_UNBOUND in st.env and name in maybe_unbound(st):
                st.env[MAYBE_UNBOUND] = const(maybe_unbound(st) - {name})

    # ----------------------------------------------------------------- statements
    def exec_block(self, stmts, st: State | None) -> State | None:
        for s in stmts:
            if st is None:
                return None
            st = self.exec_stmt(s, st)
        return st

    def exec_stmt(self, s, st: State) -> State | None:
        self.check_time()
        self.cx.statement = self.cx.frames[-1].statement = s
        handler = getattr(self, "stmt_" + type(s).__name__, None)
        try:
            if handler is None:
                for child in ast.iter_child_nodes(s):
                    if isinstance(child, ast.expr):
                        self.eval(child, st)
                out = st
            else:
                out = handler(s, st)
        except RecursionError:  # from nested blocks or targets, not expressions (`eval` names those)
            raise TooComplex("statement nested too deeply to analyse", self.line_now()) from None
        frame = self.cx.frames[-1]
        if frame.raised_at is s:  # the path ends where it raises: what follows never runs on it
            frame.raised_at, frame.raised = None, True
            return None
        return out

    def stmt_Expr(self, s, st):
        self.eval(s.value, st)
        return st

    def stmt_Assign(self, s, st):
        v = self.eval(s.value, st)
        if v == UNKNOWN and isinstance(s.value, ast.Call) and len(s.targets) == 1 \
                and self.dotted(s.targets[0]) in self.cx.module_like:
            v = self.opaque_module(s.value, st)  # `model = ImportedNet()`, later `model.parameters()`
        for t in s.targets:
            self.assign(t, v, st, s)
        return st

    def stmt_AnnAssign(self, s, st):
        if s.value is not None:
            self.assign(s.target, self.eval(s.value, st), st, s)
        return st

    def stmt_AugAssign(self, s, st):
        self.augassign(s, st)
        return st

    def stmt_Pass(self, s, st):
        return st

    def stmt_Global(self, s, st):
        return st

    stmt_Nonlocal = stmt_Global

    def stmt_Delete(self, s, st):
        for t in s.targets:
            if isinstance(t, ast.Name):
                if self.frame.is_module:
                    st.set_attr(self.frame.globals, t.id, EMPTY)
                else:
                    st.env.pop(t.id, None)
            elif isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Slice) and t.slice.lower is None \
                    and t.slice.upper is None:
                for obj in objs_of(self.eval(t.value, st), "list"):  # `del lst[:]` empties the list
                    st.set_attr(obj.id, "<elems>", EMPTY)
                    st.set_attr(obj.id, "<items>", frozenset({Tup(())}))
                    st.set_attr(obj.id, HELD, HELD_NOTHING)
            elif isinstance(t, ast.Subscript) and (slot := self.registry_slot(t, st, ("_parameters",))) is not None:
                self.delete_parameter_slot(*slot, st)  # `del module._parameters["weight"]` (weight dropout)
            elif isinstance(t, ast.Subscript):  # `del d[k]`, `del lst[i]`: fewer keys, other items
                base, key = self.eval(t.value, st), item_key(self.eval(t.slice, st))
                for obj in objs_of(base, "list"):
                    self.forget_items(obj, st)
                for obj in objs_of(base, "dict"):
                    keys = self.keyset(obj, st)
                    known = keys is not None and key is not None and len(base) == 1
                    st.set_attr(obj.id, "<keyset>", const(keys - {key}) if known else UNKNOWN)
            elif isinstance(t, ast.Attribute):
                self.eval(t.value, st)
        return st

    def stmt_Return(self, s, st):
        v = self.eval(s.value, st) if s.value is not None else NONE
        fr = self.frame
        if fr.raised_at is s:  # `return make(x)` where `make` surely raises: nothing is returned
            return None
        fr.ret = join(fr.ret, v)
        if fr.with_grads and fr.with_grads[0] != st.grad:  # leaving `with no_grad():` by a return restores it
            st = st.copy()
            st.grad = fr.with_grads[0]
        fr.ret_state = join_states(fr.ret_state, st)
        return None

    def stmt_Raise(self, s, st):
        if s.exc is not None:
            self.eval(s.exc, st)
        return None

    def stmt_Assert(self, s, st):
        self.eval(s.test, st)
        return st

    def stmt_Break(self, s, st):
        exits = self.frame.loop_exits
        if exits:
            exits[-1][0] = join_states(exits[-1][0], st)
        return None

    def stmt_Continue(self, s, st):
        exits = self.frame.loop_exits
        if exits:
            exits[-1][1] = join_states(exits[-1][1], st)
        return None

    def stmt_If(self, s, st):
        truth = self.test_truth(s.test, st)
        empty = self.empty_branch(s.test, st) if truth is None else None
        then_st = else_st = None
        if truth is not False:
            then_st = self.narrow(s.test, st.copy(), True)
            then_st.weak |= empty is True
            then_st = self.exec_block(s.body, then_st)
        if truth is not True:
            else_st = self.narrow(s.test, st.copy(), False)
            else_st.weak |= empty is False
            else_st = self.exec_block(s.orelse, else_st)
        return join_states(then_st, else_st)

    def empty_branch(self, test, st):
        """Which branch of a test of a tensor's emptiness runs on an empty one (True: the `if`,
        False: the `else`), when its size is not known (`if idx.numel() == 0: continue`), None
        for any other test.  That path is analysed, but only may facts come of it: an expert
        that receives no token is no real path to reason about, as a loop that never runs."""
        positive = True
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, positive = test.operand, False
        elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value == 0 and isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Gt)):
            test, positive = test.left, not isinstance(test.ops[0], ast.Eq)
        base = None
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) \
                and test.func.attr in ("numel", "nelement"):
            base = test.func.value
        elif isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "len" and test.args:
            base = test.args[0]
        elif isinstance(test, ast.Subscript) and isinstance(test.value, ast.Attribute) and test.value.attr == "shape":
            base = test.value.value
        elif isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "size" \
                and test.args:
            base = test.func.value
        t = tensor_of(self.peek(base, st)) if isinstance(base, (ast.Name, ast.Attribute)) else None
        return None if t is None or t.shape is not None and None not in t.shape else not positive

    def stmt_Match(self, s, st):
        self.eval(s.subject, st)
        out = st.copy()
        for case in s.cases:
            out = join_states(out, self.exec_block(case.body, st.copy()))
        return out

    def stmt_With(self, s, st):
        if any(_expects_error(item.context_expr) for item in s.items):
            return self.exec_expecting_error(s, st)
        if len(s.items) > 1:
            return self.stmt_With(self.nested_with(s), st)
        saved_grad = st.grad  # before `torch.set_grad_enabled(False)`, which sets the mode when called
        item = s.items[0]
        ctx = self.eval(item.context_expr, st)
        cm = self.user_context(ctx, st)
        if cm is not None:
            return self.with_user_context(s, cm, st)
        sites, inference = len(self.cx.no_grad_sites), len(self.cx.inference_sites)
        mode = self.grad_mode_of(ctx)
        if mode == "keep" and _may_switch_grad(item.context_expr):
            mode = None  # a library's own `no_grad()`: gradient recording is not known inside
        self.enter_grad_mode(ctx, mode, s, st)
        if item.optional_vars is not None:
            self.assign(item.optional_vars, self.enter_value(ctx), st, s)
        self.frame.with_grads.append(saved_grad)
        casting = any(isinstance(a, GradMode) and a.autocast for a in ctx)
        self.cx.autocasts += casting
        try:
            out = self.exec_block(s.body, st)
        finally:
            del self.cx.no_grad_sites[sites:]
            del self.cx.inference_sites[inference:]
            self.frame.with_grads.pop()
            self.cx.autocasts -= casting
        if out is not None:
            out.grad = saved_grad
        return out

    stmt_AsyncWith = stmt_With

    def nested_with(self, s):
        """`with a, b: body` is `with a: with b: body` (the language defines it so: `b` is
        evaluated once `a` is entered), each level a statement at `s`'s place, made once per
        `with` so that its identity is the same on every evaluation."""
        nested = self.cx.nested_withs.get(s)
        if nested is None:
            body = s.body
            for k, item in enumerate(reversed(s.items)):
                level = derived(s, type(s)(items=[item], body=body, type_comment=None), f"with{k}")
                body = [ast.copy_location(level, s)]
                level.end_lineno, level.end_col_offset = s.end_lineno, s.end_col_offset
            nested = self.cx.nested_withs[s] = body[0]
        return nested

    def exec_expecting_error(self, s, st):
        """`with pytest.raises(...)` / `self.assertRaises(...)`: the error is the test's point."""
        saved = (dict(self.cx.facts.backwards), dict(self.cx.facts.inplaces))
        out = self.exec_block(s.body, st.copy())
        self.cx.facts.backwards, self.cx.facts.inplaces = saved
        return join_states(st, out)

    def stmt_Try(self, s, st):
        body = self.exec_block(s.body, st.copy())
        handler_in = join_states(st, body)
        out = self.exec_block(s.orelse, body.copy()) if body is not None else None
        for h in s.handlers:
            hst = handler_in.copy()
            if h.type is not None:
                self.eval(h.type, hst)
            if h.name:
                self.bind(h.name, UNKNOWN, hst)
            out = join_states(out, self.exec_block(h.body, hst))
        if s.finalbody:
            if out is None:
                self.exec_block(s.finalbody, handler_in.copy())
                return None
            out = self.exec_block(s.finalbody, out)
        return out

    stmt_TryStar = stmt_Try

    def definition(self, node, st):
        """A decorator or base class: imports it names are read when the function or class is
        used (`bases_of`), not when it is defined."""
        self.cx.definitions += 1
        try:
            return self.eval(node, st)
        finally:
            self.cx.definitions -= 1

    def stmt_FunctionDef(self, s, st):
        kind = "function"
        value = None
        wrappers = []  # decorators written here, which may return a wrapper of the function
        for d in s.decorator_list:
            dv = self.definition(d, st)
            name = self.dotted(d)
            if dv and all(isinstance(a, Func) for a in dv):
                wrappers.append((d, dv))
            if name == "property":
                kind = "property"
            elif name in ("functools.cached_property", "cached_property"):
                kind = "cached_property"
            elif name == "staticmethod":
                kind = "staticmethod"
            elif name == "classmethod":
                kind = "classmethod"
            elif dv == CONTEXTMANAGER:
                self.cx.managed_funcs.add(s)
            elif isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter", "getter"):
                value = self.lookup(d.value.id, st) if isinstance(d.value, ast.Name) else None
            elif isinstance(s, ast.AsyncFunctionDef) and dv and all(isinstance(a, GradMode) for a in dv):
                pass  # `@torch.no_grad()` on an `async def` switches the mode while the call makes the coroutine,
                # and back before its body runs, in the mode of whoever awaits it: it does nothing
            elif (mode := self.grad_mode_of(dv)) != "keep" or _may_switch_grad(d):
                self.cx.grad_funcs[s] = None if mode == "keep" else mode
                if mode is False and dv and all(isinstance(a, GradMode) and a.inference for a in dv):
                    self.cx.inference_funcs.add(s)
        if value is None:
            value = frozenset({Func(s, kind=kind, closure=self.closure(s, st))})
            for d, dv in reversed(wrappers) if kind == "function" else ():
                wrapped = self.call_value(dv, [value], {}, st, d)  # `@evaluation_context`: its `wrapper`
                if wrapped and all(isinstance(a, Func) for a in wrapped):
                    value = wrapped
        if self.frame.module is not None:
            self.cx.defined_in[s] = self.frame.module
        self.bind(s.name, value, st)
        return st

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, s, st):
        decorators = [(d, self.definition(d, st)) for d in s.decorator_list]
        bases = [self.definition(b, st) for b in s.bases]
        cls = Obj(("class", gid(s)), "class")
        self.cx.class_nodes[cls.id] = s
        self.cx.class_globals[cls.id] = self.frame.globals
        st.set_attr(cls.id, "<bases>", frozenset({Tup(tuple(bases))}) if bases else EMPTY)
        frame = Frame(None, self.frame.ctx, class_obj=cls, module=self.frame.module)
        frame.is_module = False
        self.cx.frames.append(frame)
        try:
            st = self.exec_block(s.body, st) or st
            if any(self.is_dataclass_decorator(d, st) for d in s.decorator_list):
                self.cx.dataclass_fields[cls.id] = tuple(f for a in s.body if (f := self.dataclass_field(a, st)))
        finally:
            self.cx.frames.pop()
        value = frozenset({cls})
        for d, dv in reversed(decorators):  # `@MODELS.register_module()` of the project: it runs, with the class
            if dv and all(isinstance(a, Func) for a in dv):
                out = self.call_value(dv, [value], {}, st, d)
                value = out if out and all(isinstance(a, Obj) and a.kind == "class" for a in out) else value
        self.bind(s.name, value, st)
        return st

    def is_dataclass_decorator(self, d, st) -> bool:
        """`@dataclass`, `@dataclasses.dataclass(frozen=True)`: an `__init__` of the fields,
        unless `init=False`."""
        call = d if isinstance(d, ast.Call) else None
        if call is not None and any(k.arg == "init" and not (isinstance(k.value, ast.Constant) and k.value.value)
                                    for k in call.keywords):
            return False
        return self.peek(call.func if call else d, st) == frozenset({Ref("dataclasses.dataclass")})

    def dataclass_field(self, stmt, st):
        """(name, how its default is made: "value", "factory" or None for none, the value or the
        factory) of a dataclass field `name: T = default`, `= field(default_factory=list)`; None
        for a statement that is no field of `__init__` (a ClassVar, `field(init=False)`)."""
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name) \
                or "ClassVar" in ast.dump(stmt.annotation):
            return None
        name, value = stmt.target.id, stmt.value
        if value is None:
            return name, None, None
        if isinstance(value, ast.Call) and self.peek(value.func, st) == frozenset({Ref("dataclasses.field")}):
            given = {k.arg: k.value for k in value.keywords}
            if "init" in given and not (isinstance(given["init"], ast.Constant) and given["init"].value):
                return None
            if "default_factory" in given:
                return name, "factory", self.eval(given["default_factory"], st)
            return (name, "value", self.eval(given["default"], st)) if "default" in given else (name, None, None)
        return name, "value", st.get_attr(self.frame.class_obj.id, name) or UNKNOWN

    # ----------------------------------------------------------------- loops
    def stmt_For(self, s, st):
        return self.for_over(s, self.eval(s.iter, st), st)

    def for_over(self, s, it, st):
        """The `for` loop `s` over the iterable value `it`, evaluated already.  The iterable stays
        in the state while the loop runs, so that what an iteration marks on an item (a backward
        freeing its graph) is what a later iteration reads of it."""
        holder = ("for", self.frame.ctx, gid(s))
        st.heap[holder] = {"<iter>": it}
        out = self.for_loop(s, st, lambda now: now.heap[holder]["<iter>"])
        if out is not None:
            out.heap.pop(holder, None)
        return out

    def for_loop(self, s, st, iterable):
        it = iterable(st)
        items = self.exact_items(it, st)
        if items is not None and self.unrolls(s, len(items)) and not _has_jumps(s.body):
            self.frame.loops.append(s)  # still a loop for what is made in it (a fix's "in every iteration")
            self.cx.unrolling += 1
            self.cx.unrolled_work *= max(len(items), 1)
            try:
                for i in range(len(items)):  # a short known sequence: unroll, so updates stay strong
                    st = st.copy()
                    self.assign(s.target, self.item_now(iterable(st), i, st), st, s)
                    st = self.exec_block(s.body, st)
                    if st is None:
                        return None
            finally:
                self.cx.unrolling -= 1
                self.cx.unrolled_work //= max(len(items), 1)
                self.frame.loops.pop()
            return self.exec_block(s.orelse, st)
        count, counter = self.loop_count(it, st) if items is None else (len(items), None)
        if count == 0:
            return self.exec_block(s.orelse, st)

        def enter(body_st, i):
            # Elements are read on each iteration's state: marks the loop made on them are kept.
            now = iterable(body_st)
            elem = self.iter_elements(now, body_st)
            if i is not None and counter is not None:  # a concrete iteration knows its counter
                elem = counter(i, elem)
            elif i is not None and items is not None:  # or its item, with jumps or many items
                elem = self.item_now(now, i, body_st)
            self.assign(s.target, self.batch_read(elem), body_st, s)
        period = self.counter_period(s, st) if counter is not None and count is not None else None
        return self.loop(s, st, enter, may_be_empty=not (self.is_nonempty(it, st) or count), count=count,
                         period=period)

    def unrolls(self, s, n: int) -> bool:
        """Whether a loop over `n` known items runs item by item (see `few_unrolled`)."""
        body = self.cx.statement_counts.get(s)
        if body is None:
            body = self.cx.statement_counts[s] = sum(isinstance(x, ast.stmt) for x in ast.walk(s)) - 1
        return few_unrolled(n, body, self.cx.unrolled_work)

    def counter_period(self, s, st):
        """The largest `k` (2 to 16) of a test `counter % k` in the loop's body whose branch runs a
        backward or a step (`if (t + 1) % k == 0: loss.backward()`, truncated backpropagation,
        gradient accumulation), None if there is none: what the second time that branch runs
        meets (a graph its first time freed) happens at an iteration past the first two."""
        moduli = self.cx.counter_moduli.get(s)
        if moduli is None:
            moduli = self.cx.counter_moduli[s] = self.moduli_of(s)
        periods = [k for k in (int_of(self.peek(m, st)) for m in moduli) if k is not None and 2 <= k <= 16]
        return max(periods, default=None)

    def moduli_of(self, s) -> tuple:
        """The `k` nodes of the tests `counter % k` in a loop's body whose branch runs a backward or
        a step (read once per loop: the values of `k` are read in each state)."""
        names = {n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)}
        stateful = self.loop_statefulness(self.frame.module)
        out = []
        todo = list(s.body)
        while todo:
            node = todo.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            todo += ast.iter_child_nodes(node)
            if isinstance(node, ast.If) and stateful.touches(node):
                out += [mod.right for mod in ast.walk(node.test) if isinstance(mod, ast.BinOp)
                        and isinstance(mod.op, ast.Mod)
                        and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(mod.left))]
        return tuple(out)

    def item_now(self, it, i, st):
        """The `i`th item of the sequence a loop runs over, as it is now: the body may have
        replaced items (`lst[0] = ...`), so that they are no longer known one by one."""
        items = self.exact_items(it, st)
        return items[i] if items is not None and i < len(items) else self.iter_elements(it, st)

    stmt_AsyncFor = stmt_For

    def comprehension_loop(self, node, it, st):
        """`[self.train_step(b) for b in stream]`: a list comprehension whose element runs a
        backward or a step is the loop it stands for, run as a `for` loop is (its first
        iterations one by one: the second one's error is found), appending each element to a
        list; None where that is not how it runs (several generators, every path raising)."""
        gen = node.generators[0] if len(node.generators) == 1 else None
        if gen is None or gen.is_async or not self.loop_statefulness(self.frame.module).touches(node):
            return None
        loop = self.cx.comprehension_loops.get(node)
        if loop is None:
            loop = self.cx.comprehension_loops[node] = _as_loop(node, gen)
        inner = st.copy()
        inner.env[ELEMENTS] = self.make_sequence(EMPTY, inner, node)
        out = self.for_over(loop, it, inner)
        if out is None:
            return None
        made = out.env[ELEMENTS]
        self.leave_comprehension(node, st, out)
        return made

    def stmt_While(self, s, st):
        truth = self.static_truth(s.test, st)
        if truth is False:
            return self.exec_block(s.orelse, st)

        def enter(body_st, i):
            # An iteration whose condition is surely false does not run (`while not done:`), be it a
            # concrete one or one after any number of iterations that set `done`.
            return self.test_truth(s.test, body_st) is not False
        # Only a condition true whatever the state (`while True:`) never ends the loop: one true
        # on entry (`done = False`, then `while not done:`) is tested again after each iteration.
        endless = truth is True and not any(isinstance(n, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
                                            for n in ast.walk(s.test))
        return self.loop(s, st, enter, may_be_empty=truth is not True, exits_normally=not endless)

    def loop(self, s, st, enter, may_be_empty=True, exits_normally=True, count=None, period=None):
        """The first two iterations run concretely, each on the state the previous one left
        (an error they reach happens on a real path: the first iteration, or the second,
        where loop-carried graphs fail); then the body is iterated to a fixpoint from the
        join of every iteration count, with summary ids, which adds only may facts.  A loop
        known to run `count` times, no more than the fixpoint would take, runs exactly that
        many concrete iterations (`for epoch in range(3)`).  A loop that runs no backward
        or step (itself or through the functions it calls) and changed no graph in place in
        its first iteration, or whose first iteration made no must fact (no graph that surely
        requires grad, no backward, no object), goes straight to the fixpoint: most loops of
        library code have nothing to learn from running one by one; so does a loop nested in
        one that is widening.  A loop known to run at least as often as it ran one by one
        leaves after the last of those iterations: its must facts are that iteration's.  One
        whose backward runs every `period` iterations (see `counter_period`) runs, one by one,
        as many as it takes for that backward to run twice."""
        fr = self.frame
        fr.loops.append(s)
        fr.events.append(set())
        head = st  # the join of the states after 0, 1, 2, ... iterations
        back = backs = breaks = None  # after the last iteration run; after any iteration; at a break
        concrete_backs = last_concrete = None  # after any concrete iteration; after the last one
        ran_concrete = 0
        widened = False
        stateful = self.cx.stateful_loops.get(s)
        if stateful is None:
            stateful = self.cx.stateful_loops[s] = self.loop_statefulness(fr.module).touches(s)
        # Inside a loop that is widening every id is a summary: no iteration here can be concrete.
        rounds, concrete_iterations = self.cx.limits.loop_rounds, self.cx.limits.concrete_iterations
        if period is not None and stateful and self.cx.budget > 0 and not self.cx.widening:
            concrete_iterations = min(count, 2 * period + 1)
            rounds += max(0, concrete_iterations - self.cx.limits.concrete_iterations)
        exact = count is not None and count <= rounds and self.cx.budget > 0 and not self.cx.widening
        concrete_rounds = rounds if exact else 0 if self.cx.widening else concrete_iterations if stateful else 1
        work, inplaces = self.cx.sure_events, self.cx.graph_inplaces
        try:
            for i in range(rounds if self.cx.budget > 0 else concrete_iterations):
                if i == 1 and self.cx.sure_events == work and not exact:  # a known count runs out: its
                    concrete_rounds = 0  # later items may take a branch the first did not (`if j != i:`)
                elif i == 1 and self.cx.graph_inplaces != inplaces and not exact and not self.cx.widening:
                    # a graph changed in place: the next iteration may save what this one modifies
                    concrete_rounds = max(concrete_rounds, concrete_iterations)
                concrete = i < concrete_rounds
                if (concrete and i and back is None) or (count is not None and i >= count):
                    break  # no iteration goes on to the next
                if not concrete and not widened:
                    widened = True
                    self.cx.widening += 1
                fr.loop_exits.append([None, None])
                # a later iteration of a loop that surely runs starts after one or more iterations
                later = backs if i and not may_be_empty and backs is not None else head
                body_st = (back if i and concrete else later).copy()
                if enter(body_st, i if concrete else None) is False:
                    fr.loop_exits.pop()
                    break
                out = self.exec_block(s.body, body_st)
                brk, cont = fr.loop_exits.pop()
                breaks = join_states(breaks, brk)
                back = join_states(out, cont)
                old_backs, backs = backs, join_states(backs, back)
                if concrete:
                    concrete_backs = join_states(concrete_backs, back)
                    last_concrete, ran_concrete = back, ran_concrete + 1
                new_head = join_states(head, back)
                if not concrete and new_head == head and (may_be_empty or old_backs == backs):
                    break
                head = new_head
            events = fr.events[-1]
        finally:
            if widened:
                self.cx.widening -= 1
            fr.loops.pop()
            fr.events.pop()
        self.loop_events(s, events)
        exit_st = None
        if exits_normally:
            exit_st = back if exact else head if may_be_empty else backs
            if widened and exit_st is not None and self.cx.sure_events != work:
                if count is not None and count >= ran_concrete:
                    # it runs at least as often as it ran one by one: it leaves after the last of them
                    sure = last_concrete
                else:
                    sure = join_states(st, concrete_backs) if may_be_empty else concrete_backs
                exit_st = adopt_sure(exit_st, sure)
            if exit_st is not None:
                exit_st = self.exec_block(s.orelse, exit_st.copy())
        return join_states(exit_st, breaks)

    def note_event(self, name: str, node) -> None:
        """Record backward / step / zero_grad in every enclosing loop of every active frame."""
        for fr in self.cx.frames:
            for ev in fr.events:
                ev.add((name, node) if name == "step" else name)

    def loop_events(self, loop, events) -> None:
        names = {e if isinstance(e, str) else e[0] for e in events}
        key = (self.frame.ctx, gid(loop))
        if "backward" in names:
            self.cx.facts.backward_loops.add(key)
        else:
            self.cx.facts.backward_loops.discard(key)
        if "backward" in names and "step" in names and "zero_grad" not in names:
            step = next(e[1] for e in events if not isinstance(e, str))
            from gradguard.facts import LoopSteps
            self.cx.facts.loop_steps[key] = LoopSteps(loop, step)
        else:
            self.cx.facts.loop_steps.pop(key, None)

    # ----------------------------------------------------------------- calls of local functions

    # ----------------------------------------------------------------- facts helpers
    def loops_here(self) -> tuple:
        """Every loop enclosing this point, through the calls that led here, outermost first."""
        return tuple(loop for fr in self.cx.frames for loop in fr.loops)

    def current_function(self):
        for fr in reversed(self.cx.frames):
            if fr.func is not None:
                return fr.func
        return None


ELEMENTS = "<elements>"  # in a comprehension run as a loop: the list its elements are appended to


def _as_loop(node, gen) -> ast.For:
    """The `for` statement a one-generator list comprehension stands for: `for target in iter:
    [if cond: ...] <elements>.append(elt)`, each made node with an id derived from the
    comprehension's, at its place."""
    def made(n, part):
        ast.copy_location(n, node)
        n.end_lineno, n.end_col_offset = node.end_lineno, node.end_col_offset
        return derived(node, n, part)
    sink = made(ast.Name(id=ELEMENTS, ctx=ast.Load()), "elements")
    append = made(ast.Attribute(value=sink, attr="append", ctx=ast.Load()), "append")
    body = made(ast.Expr(value=made(ast.Call(func=append, args=[node.elt], keywords=[]), "call")), "expr")
    for k, cond in enumerate(reversed(gen.ifs)):
        body = made(ast.If(test=cond, body=[body], orelse=[]), f"if{k}")
    return made(ast.For(target=gen.target, iter=gen.iter, body=[body], orelse=[], type_comment=None), "loop")


def _called_name(expr) -> str:
    """The last name of what `expr` calls or is: `torch.no_grad()` and `no_grad` give "no_grad"."""
    func = expr.func if isinstance(expr, ast.Call) else expr
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _may_switch_grad(expr) -> bool:
    """A context manager or decorator GradGuard does not know whose name says it switches
    gradient recording (`accelerate`'s or a project's own `no_grad`, `inference_mode`)."""
    name = _called_name(expr).lower()
    return any(word in name for word in ("no_grad", "inference_mode", "grad_enabled", "enable_grad"))


def _expects_error(expr) -> bool:
    name = _called_name(expr)
    return name.startswith("assertRaises") or name == "raises"


def _has_jumps(body) -> bool:
    """Whether a loop's body can end an iteration early: a `break` or `continue` of this loop
    (not of a loop nested in it), a `return` or a `yield` (not of a function defined in it)."""
    todo = [(node, False) for node in body]  # (node, inside a nested loop's body)
    while todo:
        node, nested = todo.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) \
                or isinstance(node, (ast.Break, ast.Continue)) and not nested:
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):  # its `else` is still ours
            todo += [(n, True) for n in node.body] + [(n, nested) for n in node.orelse]
            todo += [(node.iter if not isinstance(node, ast.While) else node.test, nested)]
            continue
        todo += [(child, nested) for child in ast.iter_child_nodes(node)]
    return False


