"""The flow engine: abstract interpretation of a module, statement by statement.

Python's control flow is structured, so the control-flow graph of a body is walked
through its statements: `if` joins its branches, `for`/`while` iterate their body to a
fixpoint over the back edge (with break/continue/else), `try` and `with` route their
states, `return`/`break`/`continue` divert states to the frame's or loop's exits.
Calls to functions, methods and properties defined in the file are analysed in place
with the caller's abstract arguments (a call-string context keeps their graph regions
apart), which is how a tensor cached on `self` in one method is followed into another.

Expression evaluation lives in `exprs.py`, torch semantics in `torch_sem.py`; this file
is only about control flow, frames and facts.
"""
from __future__ import annotations

import ast
import os
import re
from dataclasses import replace

from gradguard import knowledge as K
from gradguard.engine import binder
from gradguard.engine.contexts import CONTEXTMANAGER, UserContexts
from gradguard.engine.exprs import Expressions
from gradguard.engine.limits import Clock, Limits, TooComplex, few_unrolled, running
from gradguard.engine.state import (ESCAPED, GLOBALS, MAYBE_UNBOUND, YIELDED, State, adopt_sure, join_states,
                                    maybe_unbound)
from gradguard.engine.torch_sem import TorchSemantics
from gradguard.engine.values import (
    EMPTY, HELD, HELD_NOTHING, NONE, UNKNOWN, UNSEEN_ATTRS, Func, GradMode, Obj, Ref, Tup, const, graph_unknown,
    int_of, item_key, join, map_tensors, objs_of, tensor_of,
)
from gradguard.facts import Facts
from gradguard.ids import derived, gid, number
from gradguard.spans import LINE_BREAK
from gradguard.workspace import top_imports

# What runs of a workspace module when it is imported: its definitions, not its script code.
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
               ast.AnnAssign)


class ImportsTooSlow(Exception):
    """Following the file's imports has done the work `Limits.import_work` allows: analyse it
    again without them."""


class Frame:
    """One activation: a module body or an inlined function call."""

    def __init__(self, func, ctx, is_module=False, class_obj=None, names=(frozenset(), frozenset()),
                 module=None):
        self.func = func
        self.ctx = ctx
        self.is_module = is_module
        self.module = module  # the workspace module whose code this is (None: the analysed file)
        self.call_node = None  # the call that made this activation (None: a module or class body)
        self.globals = GLOBALS if module is None else ("<module>", module.path)  # heap object of its globals
        self.class_obj = class_obj  # for class bodies: names are written to the class object
        self.locals, self.globals_declared = names
        self.ret = EMPTY
        self.ret_state = None
        self.yields = EMPTY
        self.loops = []  # enclosing loop statements in this function, innermost last
        self.loop_exits = []  # per loop: [break state, continue state]
        self.self_value = None
        self.events = []  # per loop: set of "backward" / "step" / "zero_grad" events
        self.statement = None  # the statement of this frame being executed
        self.raised_at = None  # the statement of this frame that surely raises on this path (see note_raise)
        self.raised = False  # a path of this activation ended by such a raise
        self.on_yield = None  # for a `@contextmanager` entered by a `with`: runs its body (see contexts.py)
        self.closed_over = frozenset()  # the names of its function's closure (see `closure`)
        self.cells: dict = {}  # name -> heap object holding it: a `nonlocal` name (see `closure`)
        self.with_grads = []  # per enclosing `with` of this frame: the grad mode it restores on exit


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


DEFAULT = "<default>"  # in a function's closure: a parameter's default, evaluated where it was defined
MODULE = Ref("torch.nn.Module")
MAX_MRO_DEPTH = 32  # classes between a class and `object`, far more than any real hierarchy
CELL = "<cell>"  # in a function's closure: the heap object holding a name it declares `nonlocal`


class Interpreter(Expressions, TorchSemantics, UserContexts):
    def __init__(self, source: str, tree: ast.Module, deadline: float | None = None, *, path: str = "<string>",
                 workspace=None, limits: Limits = Limits()):
        self.source = source
        self.limits = limits
        self.tree = number(tree, "") if not hasattr(tree, "gid") else tree
        self.frames: list[Frame] = []
        frames = self.frames  # not `self`: a clock holding the interpreter would keep every analysis alive until gc
        self.clock = Clock(deadline, lambda: _line_now(frames), limits.work)
        self.facts = Facts(source, tree)
        self.path = path
        self.own_path = os.path.realpath(path) if workspace is not None else path
        # a workspace.Workspace: where imports lead (None: every import is opaque, as for a text
        # that is no file, such as an editor's untitled document: its imports would resolve
        # against whatever directory the process runs in)
        self.workspace = workspace if workspace is not None and os.path.isfile(path) else None
        self.defined_in: dict = {}  # function node of a workspace module -> that module
        self.namespaces: dict = {}  # path of a workspace module -> its namespace object, once loaded
        self.statefulness_of: dict = {}  # path of a workspace module -> its binder.Statefulness
        self.importing = 0  # workspace modules being loaded, nested
        self.lazy: dict = {}  # (globals of the importing module, Ref bound) -> (module, level, importer, name)
        self.class_globals: dict = {}  # class object id -> the globals of the module defining it
        self.definitions = 0  # decorators and base classes being evaluated: imports they name stay unread
        self.active_calls: list = []
        self.analysed_funcs: set = set()
        self.class_nodes: dict = {}  # class object id -> ClassDef
        self.dataclass_fields: dict = {}  # class object id of a @dataclass -> its fields (see `dataclass_field`)
        self.obj_class: dict = {}  # instance object id -> class object id
        self.module_kind: dict = {}  # module object id -> torch.nn class name or "local"
        self.submodule_memo: dict = {}  # module object id -> (its submodules, the heap entries they were read from)
        # function -> the grad mode its decorator runs it in (`@torch.no_grad()`: False,
        # `@torch.enable_grad()`: True, one that may switch it either way: None)
        self.grad_funcs: dict = {}
        self.inference_funcs: set = set()  # functions decorated `@torch.inference_mode()`
        self.func_names: dict = {}  # function node -> (locals, globals declared, is a generator)
        self.lines = LINE_BREAK.split(source)  # numbered as `ast` numbers them
        self.sites = binder.functions(tree)
        self.owner_of = {f.node: f.owner for f in self.sites}
        self.statefulness = None  # a binder.Statefulness, made when the first loop runs
        self.counter_moduli: dict = {}  # loop node -> the `k` of its `counter % k` tests (see `counter_period`)
        self.stateful_loops: dict = {}  # loop node -> whether its iterations are worth running one by one
        # Work bound: statements interpreted.  Past it, calls are no longer followed into their
        # bodies and loops take two rounds, so huge files degrade in precision, not in time.
        self.budget = limits.statements + limits.statements_per_line * len(self.lines)
        # Statements of workspace modules (their definitions, the calls into them): past it,
        # their functions are opaque again, so following imports costs at most this.
        self.foreign_budget = limits.foreign_statements
        self.module_like = binder.module_like(source, K.MODULE_METHODS)
        # In a function no module-level code called, the caller's grad mode is unknown (EMA and
        # weight-init helpers are called under no_grad): an in-place op on a leaf is not reported.
        self.caller_unknown = False
        self.one_of_several = False  # a call runs on one alternative of what it calls (see `alternatives`)
        self.default_dtype_set = False  # `torch.set_default_dtype` seen: float factories' dtype not known
        # factories make CPU tensors unless the program sets another default device somewhere
        self.default_cpu = "set_default_device" not in source and re.search(r"with\s+torch\.device\b", source) is None
        self.no_grad_sites: list = []  # the no_grad blocks / decorated functions being executed
        self.inference_sites: list = []  # the inference_mode blocks being executed (see `stmt_With`)
        self.entered_modes: list = []  # grad modes entered by `mode.__enter__()`: what `__exit__` restores
        self.managed_funcs: set = set()  # `@contextmanager` functions (see contexts.py)
        self.pending_yield = None  # what the next call's `yield` runs: a `with` body (see `with_managed`)
        self.not_followed = None  # the function of the last call not followed (see `call_function`)
        self.once_bound: dict = {}  # function -> the names it binds once (see `closure`)
        self.grad_off_call = None  # the last plain `torch.set_grad_enabled(False)` call: where a graph was cut
        self.frozen_by: dict = {}  # module object id -> the statement that froze its parameters
        self.statement = None  # the statement being executed
        self.instances: dict = {}  # site -> evaluations numbered so far (see `region_id`)
        self.escaped: set = set()  # sites of lists and dicts that outlived their call (see `container_id`)
        self.unknown_spread = None  # the call being made, if a `*args` in it was not known item by item
        self.unknown_keywords = None  # the call being made, if a `**kwargs` in it was not known item by item
        self.widening = 0  # loops now past their concrete iterations: new ids are summaries
        self.sure_events = 0  # must facts made so far: graphs, backwards, sure in-place hits, objects (see `loop`)
        self.graph_inplaces = 0  # in-place ops on tensors in a graph so far (see `loop`)
        self.inplace_flags: dict = {}  # module object id -> (constructor call, position of its inplace flag)
        self.saved_index: dict = {}  # storage id -> ids of the regions that may have saved it
        self.chain_truth = (None, None)  # the `and`/`or` evaluated last, and its truth (see `bool_chain`)
        self.unrolling = 0  # loops and comprehensions being run item by item (see `container_id`)
        self.member_nodes: dict = {}  # non-leaf tensor -> the list element that put it in a list (see raises.py)
        self.nested_withs: dict = {}  # `with a, b:` -> the `with a: with b:` it runs as
        self.unrolled_work = 1  # the product of the item counts of the loops being unrolled (see `unrolls`)
        self.statement_counts: dict = {}  # loop -> the statements of its body

    # ----------------------------------------------------------------- driver
    def run(self) -> Facts:
        frame = Frame(None, (), is_module=True)
        st = State({}, {GLOBALS: {"__name__": const("__main__")}}, True, {ESCAPED: self.escaped})
        self.frames.append(frame)
        with running(self.clock):
            end = self.exec_block(self.tree.body, st)
            if end is not None or not frame.raised:  # (every path raised: what it never reached never runs)
                self.analyse_unreached(end if end is not None else st)
        self.frames.pop()
        return self.facts

    def line_now(self) -> int | None:
        """The line of the analysed file's statement being executed (see `_line_now`)."""
        return _line_now(self.frames)

    def analyse_unreached(self, st: State) -> None:
        """Functions no module-level code called and whose text has a sink: analyse them with
        unknown arguments (methods with `self` an instance made by running `__init__`)."""
        instances: dict = {}
        self.caller_unknown = True
        for site in self.sites:
            node, owner = site.node, site.owner
            if node in self.analysed_funcs or not binder.function_has_sink(self.lines, node):
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
        cached = self.once_bound.get(func)
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
            cached = self.once_bound[func] = frozenset(n for n, c in counts.items() if c == 1)
        return cached

    def names_of(self, func) -> tuple:
        """(local names, names declared global, is a generator) of a function, computed once."""
        cached = self.func_names.get(func)
        if cached is None:
            local, glob = _scope(func)
            module = self.defined_in.get(func)
            lines = self.lines if module is None else module.lines
            text = "\n".join(lines[func.lineno - 1: getattr(func, "end_lineno", func.lineno)])
            cached = self.func_names[func] = (local, glob, "yield" in text and _is_generator(func))
        return cached

    def loop_statefulness(self, module) -> binder.Statefulness:
        """Which lines of the analysed file (or of a workspace module) run a backward or a step."""
        if module is None:
            if self.statefulness is None:
                self.statefulness = binder.Statefulness(self.source, self.sites, self.imported_stateful())
            return self.statefulness
        if module.path not in self.statefulness_of:
            self.statefulness_of[module.path] = binder.Statefulness(module.source, binder.functions(module.tree))
        return self.statefulness_of[module.path]

    def imported_stateful(self) -> frozenset:
        """The names this file imports from workspace modules that run a backward or a step
        (all the names a module defines, for one imported whole): a loop calling one runs
        its iterations one by one, as it would the file's own training step."""
        if self.workspace is None:
            return frozenset()
        out = set()
        for module, level, names in top_imports(self.tree):
            text = self.workspace.text(self.path, module, level)
            if text is not None and binder.STATEFUL.search(text):
                out |= set(names) if names else set(self.workspace.exported(self.path, module, level) or ())
        return frozenset(out)

    def check_time(self):
        self.budget -= 1
        if self.frames and self.frames[-1].module is not None:
            self.foreign_budget -= 1
        self.clock.tick()
        if self.namespaces and self.clock.work > self.limits.import_work:
            raise ImportsTooSlow()

    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    def entry_call(self):
        """While code of an imported module runs: the call in the analysed file that led
        there (an error raised inside is reported at it); None in the analysed file's code."""
        if self.frame.module is None:
            return None
        for outer, inner in zip(reversed(self.frames[:-1]), reversed(self.frames[1:])):
            if outer.module is None:
                return inner.call_node
        return None

    @property
    def current_file(self) -> str:
        """The file whose code runs now: a workspace module's, or the one analysed."""
        return self.frame.module.path if self.frame.module is not None else self.path

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
        v = st.get_attr(fr.globals, name)
        if v is not None:
            return self.imported(name, v, st, fr.globals) if self.reads_imports else v
        return self.builtin(name)

    @property
    def reads_imports(self) -> bool:
        """Whether a name's use now reads the workspace module it was imported from: not while
        a decorator or base class is evaluated, nor in a function no module-level code called."""
        return bool(self.lazy) and not (self.caller_unknown or self.definitions)

    def imported(self, name: str, v, st: State, where):
        """`v`, or what a name imported from a workspace module is, read from the module the
        first time the name is used (and bound in its place: the heap object `where` holds the
        module's globals, None for a local): an import costs nothing until the code analysed
        touches what it brought."""
        scope = self.frame.globals if where is None else where
        for a in v:
            found = self.resolve_import(scope, a, st)
            if found is not None:
                if where is None:
                    st.env[name] = found
                else:
                    st.set_attr(where, name, found)
                return found
        return v

    def resolve_import(self, scope, atom, st: State):
        """What the lazily imported reference `atom`, bound in the globals `scope`, stands for
        in the workspace; None if it is no such reference or leads outside the workspace."""
        entry = self.lazy.pop((scope, atom), None) if isinstance(atom, Ref) else None
        if entry is None:  # taken out while resolved: a cycle of imports meets it opaque
            return None
        found = self.import_now(*entry, st)
        if found is not None:
            self.lazy[(scope, atom)] = entry  # other paths' states still hold the reference
        return found

    def bases_of(self, cls_id, st: State) -> list:
        """A class's bases in the order its class statement lists them (the order Python looks
        methods up in), those imported from a workspace module read from it now: a base class
        matters when a method or the class's kind is looked up, not when it is defined."""
        items = [frozenset().union(*x) for x in
                 zip(*(a.items for a in st.get_attr(cls_id, "<bases>") or EMPTY if isinstance(a, Tup)))]
        scope = self.class_globals.get(cls_id)
        if self.lazy and any(isinstance(b, Ref) and (scope, b) in self.lazy for item in items for b in item):
            items = [frozenset().union(*(self.resolve_import(scope, b, st) or frozenset({b}) for b in item))
                     for item in items]
            st.set_attr(cls_id, "<bases>", frozenset({Tup(tuple(items))}))
        return [a for item in items for a in sorted(item, key=self.stable_key)]

    def stable_key(self, atom) -> tuple:
        """Orders the classes one base expression may be (`A if flag else B`) the same way in every run."""
        node = self.class_nodes.get(atom.id) if isinstance(atom, Obj) else None
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

    def import_now(self, module: str, level: int, importer: str, attr: str | None, st: State):
        """The namespace of `module` (attr None), or what it binds to `attr` (a submodule, if
        the module is a package that does not bind it)."""
        source = self.workspace_module(module, level, st, importer)
        if source is None or attr is None:
            return source
        ns = next(iter(source)).id
        v = st.get_attr(ns, attr)
        if v is not None and self.lazy:  # the package's `__init__` imported it in turn
            v = self.imported(attr, v, st, ns)
        return v if v is not None else self.workspace_module(f"{module}.{attr}" if module else attr, level, st,
                                                            importer)

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
        self.statement = self.frames[-1].statement = s
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
        frame = self.frames[-1]
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
                and self.dotted(s.targets[0]) in self.module_like:
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

    def stmt_Import(self, s, st):
        for alias in s.names:
            if alias.asname:
                self.bind(alias.asname, self.lazy_import(alias.name, 0, None, alias.name), st)
            else:
                top = alias.name.split(".")[0]
                self.bind(top, self.lazy_import(top, 0, None, top), st)
        return st

    def stmt_ImportFrom(self, s, st):
        mod = s.module or ""
        for alias in s.names:
            dotted = f"{mod}.{alias.name}" if mod else alias.name
            if alias.name != "*":
                self.bind(alias.asname or alias.name, self.lazy_import(mod, s.level, alias.name, dotted), st)
                continue
            for name in self.workspace.exported(self.current_file, mod, s.level) or () if self.workspace else ():
                self.bind(name, self.lazy_import(mod, s.level, name, f"{mod}.{name}" if mod else name), st)
        return st

    def lazy_import(self, module: str, level: int, attr: str | None, dotted: str):
        """An opaque reference to the imported name, resolved into the workspace module (if
        it is one) where the name is first used (see `imported`)."""
        ref = Ref("." * level + dotted)
        if self.workspace is not None:
            self.lazy[(self.frame.globals, ref)] = (module, level, self.current_file, attr)
        return frozenset({ref})

    def workspace_module(self, name: str, level: int, st: State, importer: str | None = None):
        """The namespace of the workspace module an import names, its definitions run once
        (functions, classes, constants, its own imports; not its other top-level code), or
        None when the import leads outside the workspace (then it stays opaque)."""
        if self.workspace is None:
            return None
        module = self.workspace.resolve(importer or self.current_file, name, level)
        if module is None or module.path == self.own_path:  # the file analysed is not a module of itself
            return None
        ns = self.namespaces.get(module.path)
        if ns is not None:
            return frozenset({ns})
        if len(self.namespaces) >= self.limits.modules or self.importing >= self.limits.import_depth \
                or self.foreign_budget < 0:
            return None
        ns = self.namespaces[module.path] = Obj(("<module>", module.path), "namespace")
        self.facts.add_module(module)
        st.set_attr(ns.id, "__name__", const(name))  # as this import names it (the parsed module is shared)
        self.frames.append(Frame(None, (), is_module=True, module=module))
        self.importing += 1
        statement, grad = self.statement, st.grad
        out = st
        try:
            for stmt in module.tree.body:
                if isinstance(stmt, DEFINITIONS):
                    out = self.exec_stmt(stmt, out) or out
        finally:
            self.importing -= 1
            self.frames.pop()
            self.statement = statement
        st.env, st.heap, st.grad = out.env, out.heap, grad  # the importer's state goes on from here
        return frozenset({ns})

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
        sites, inference = len(self.no_grad_sites), len(self.inference_sites)
        mode = self.grad_mode_of(ctx)
        if mode == "keep" and _may_switch_grad(item.context_expr):
            mode = None  # a library's own `no_grad()`: gradient recording is not known inside
        self.enter_grad_mode(ctx, mode, s, st)
        if item.optional_vars is not None:
            self.assign(item.optional_vars, self.enter_value(ctx), st, s)
        self.frame.with_grads.append(saved_grad)
        try:
            out = self.exec_block(s.body, st)
        finally:
            del self.no_grad_sites[sites:]
            del self.inference_sites[inference:]
            self.frame.with_grads.pop()
        if out is not None:
            out.grad = saved_grad
        return out

    stmt_AsyncWith = stmt_With

    def nested_with(self, s):
        """`with a, b: body` is `with a: with b: body` (the language defines it so: `b` is
        evaluated once `a` is entered), each level a statement at `s`'s place, made once per
        `with` so that its identity is the same on every evaluation."""
        nested = self.nested_withs.get(s)
        if nested is None:
            body = s.body
            for k, item in enumerate(reversed(s.items)):
                level = derived(s, type(s)(items=[item], body=body, type_comment=None), f"with{k}")
                body = [ast.copy_location(level, s)]
                level.end_lineno, level.end_col_offset = s.end_lineno, s.end_col_offset
            nested = self.nested_withs[s] = body[0]
        return nested

    def exec_expecting_error(self, s, st):
        """`with pytest.raises(...)` / `self.assertRaises(...)`: the error is the test's point."""
        saved = (dict(self.facts.backwards), dict(self.facts.inplaces))
        out = self.exec_block(s.body, st.copy())
        self.facts.backwards, self.facts.inplaces = saved
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
        self.definitions += 1
        try:
            return self.eval(node, st)
        finally:
            self.definitions -= 1

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
                self.managed_funcs.add(s)
            elif isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter", "getter"):
                value = self.lookup(d.value.id, st) if isinstance(d.value, ast.Name) else None
            elif (mode := self.grad_mode_of(dv)) != "keep" or _may_switch_grad(d):
                self.grad_funcs[s] = None if mode == "keep" else mode
                if mode is False and dv and all(isinstance(a, GradMode) and a.inference for a in dv):
                    self.inference_funcs.add(s)
        if value is None:
            value = frozenset({Func(s, kind=kind, closure=self.closure(s, st))})
            for d, dv in reversed(wrappers) if kind == "function" else ():
                wrapped = self.call_value(dv, [value], {}, st, d)  # `@evaluation_context`: its `wrapper`
                if wrapped and all(isinstance(a, Func) for a in wrapped):
                    value = wrapped
        if self.frame.module is not None:
            self.defined_in[s] = self.frame.module
        self.bind(s.name, value, st)
        return st

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, s, st):
        decorators = [(d, self.definition(d, st)) for d in s.decorator_list]
        bases = [self.definition(b, st) for b in s.bases]
        cls = Obj(("class", gid(s)), "class")
        self.class_nodes[cls.id] = s
        self.class_globals[cls.id] = self.frame.globals
        st.set_attr(cls.id, "<bases>", frozenset({Tup(tuple(bases))}) if bases else EMPTY)
        frame = Frame(None, self.frame.ctx, class_obj=cls, module=self.frame.module)
        frame.is_module = False
        self.frames.append(frame)
        try:
            st = self.exec_block(s.body, st) or st
            if any(self.is_dataclass_decorator(d, st) for d in s.decorator_list):
                self.dataclass_fields[cls.id] = tuple(f for a in s.body if (f := self.dataclass_field(a, st)))
        finally:
            self.frames.pop()
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
        # The iterable stays in the state while the loop runs, so that what an iteration marks on
        # an item (a backward freeing its graph) is what a later iteration reads of it.
        holder = ("for", self.frame.ctx, gid(s))
        st.heap[holder] = {"<iter>": self.eval(s.iter, st)}
        out = self.for_loop(s, st, lambda now: now.heap[holder]["<iter>"])
        if out is not None:
            out.heap.pop(holder, None)
        return out

    def for_loop(self, s, st, iterable):
        it = iterable(st)
        items = self.exact_items(it, st)
        if items is not None and self.unrolls(s, len(items)) and not _has_jumps(s.body):
            self.frame.loops.append(s)  # still a loop for what is made in it (a fix's "in every iteration")
            self.unrolling += 1
            self.unrolled_work *= max(len(items), 1)
            try:
                for i in range(len(items)):  # a short known sequence: unroll, so updates stay strong
                    st = st.copy()
                    self.assign(s.target, self.item_now(iterable(st), i, st), st, s)
                    st = self.exec_block(s.body, st)
                    if st is None:
                        return None
            finally:
                self.unrolling -= 1
                self.unrolled_work //= max(len(items), 1)
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
        body = self.statement_counts.get(s)
        if body is None:
            body = self.statement_counts[s] = sum(isinstance(x, ast.stmt) for x in ast.walk(s)) - 1
        return few_unrolled(n, body, self.unrolled_work)

    def counter_period(self, s, st):
        """The largest `k` (2 to 16) of a test `counter % k` in the loop's body whose branch runs a
        backward or a step (`if (t + 1) % k == 0: loss.backward()`, truncated backpropagation,
        gradient accumulation), None if there is none: what the second time that branch runs
        meets (a graph its first time freed) happens at an iteration past the first two."""
        moduli = self.counter_moduli.get(s)
        if moduli is None:
            moduli = self.counter_moduli[s] = self.moduli_of(s)
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
        stateful = self.stateful_loops.get(s)
        if stateful is None:
            stateful = self.stateful_loops[s] = self.loop_statefulness(fr.module).touches(s)
        # Inside a loop that is widening every id is a summary: no iteration here can be concrete.
        rounds, concrete_iterations = self.limits.loop_rounds, self.limits.concrete_iterations
        if period is not None and stateful and self.budget > 0 and not self.widening:
            concrete_iterations = min(count, 2 * period + 1)
            rounds += max(0, concrete_iterations - self.limits.concrete_iterations)
        exact = count is not None and count <= rounds and self.budget > 0 and not self.widening
        concrete_rounds = rounds if exact else 0 if self.widening else concrete_iterations if stateful else 1
        work, inplaces = self.sure_events, self.graph_inplaces
        try:
            for i in range(rounds if self.budget > 0 else concrete_iterations):
                if i == 1 and self.sure_events == work and not exact:  # a known count runs out: its
                    concrete_rounds = 0  # later items may take a branch the first did not (`if j != i:`)
                elif i == 1 and self.graph_inplaces != inplaces and not exact and not self.widening:
                    # a graph changed in place: the next iteration may save what this one modifies
                    concrete_rounds = max(concrete_rounds, concrete_iterations)
                concrete = i < concrete_rounds
                if (concrete and i and back is None) or (count is not None and i >= count):
                    break  # no iteration goes on to the next
                if not concrete and not widened:
                    widened = True
                    self.widening += 1
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
                self.widening -= 1
            fr.loops.pop()
            fr.events.pop()
        self.loop_events(s, events)
        exit_st = None
        if exits_normally:
            exit_st = back if exact else head if may_be_empty else backs
            if widened and exit_st is not None and self.sure_events != work:
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
        for fr in self.frames:
            for ev in fr.events:
                ev.add((name, node) if name == "step" else name)

    def loop_events(self, loop, events) -> None:
        names = {e if isinstance(e, str) else e[0] for e in events}
        key = (self.frame.ctx, gid(loop))
        if "backward" in names:
            self.facts.backward_loops.add(key)
        else:
            self.facts.backward_loops.discard(key)
        if "backward" in names and "step" in names and "zero_grad" not in names:
            step = next(e[1] for e in events if not isinstance(e, str))
            from gradguard.facts import LoopSteps
            self.facts.loop_steps[key] = LoopSteps(loop, step)
        else:
            self.facts.loop_steps.pop(key, None)

    # ----------------------------------------------------------------- calls of local functions
    def call_function(self, func: Func, args, kwargs, st: State, call_node, root=False):
        node = func.node
        self.analysed_funcs.add(node)
        depth = sum(1 for n in self.active_calls if not _forwards(n))  # a forwarder adds no depth of its own
        # a function that calls itself by its name (`_flatten(x)` in `_flatten`, `self.gather(o)` in `gather`),
        # walking a nested value, is followed a few levels deep; one reached again another way is not (a module's
        # `forward` reached through an attribute that may hold the module itself or one of its children)
        called = getattr(call_node, "func", None)
        by_name = getattr(called, "id", getattr(called, "attr", None)) == getattr(node, "name", None)
        if self.active_calls.count(node) >= (self.limits.recursion if by_name else 1) or \
                depth >= self.limits.call_depth or \
                (self.budget < 0 and not root) or (self.foreign_budget < 0 and node in self.defined_in):
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
            self.not_followed = node
            return UNKNOWN
        if self.frames and not root:
            ctx = (self.frame.ctx + (gid(call_node) if call_node is not None else None,))[-self.limits.call_string:]
        else:
            ctx = (gid(node),)
        local, glob, generator = self.names_of(node)
        arg_nodes = [(k.value, kwargs[k.arg]) for k in getattr(call_node, "keywords", ()) if k.arg in kwargs]
        frame = Frame(node, ctx, names=(local, glob), module=self.defined_in.get(node))
        frame.call_node = call_node
        frame.on_yield, self.pending_yield = self.pending_yield, None
        grad = self.grad_funcs.get(node, st.grad)
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
        stash = ("<env>", len(self.frames))
        callee.heap = st.heap  # shared: what the call writes, the caller has (defaults may have allocated)
        st.heap[stash] = st.env
        self.frames.append(frame)
        self.active_calls.append(node)
        no_grad = self.grad_funcs.get(node) is False
        if no_grad:
            self.no_grad_sites.append(node)
        inference = node in self.inference_funcs
        if inference:
            self.inference_sites.append(node)
        # the function runs whole on the path where it is the one called: its own ops are not
        # applied to one alternative of something else (see `alternatives`)
        several, self.one_of_several = self.one_of_several, False
        statement = self.statement
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
            self.active_calls.pop()
            self.frames.pop()
            self.statement = statement
            if no_grad:
                self.no_grad_sites.pop()
            if inference:
                self.inference_sites.pop()
            self.one_of_several = several
        if out is None and frame.raised:  # every path of the call ended, one by a raise: so does the caller's
            self.frame.raised_at = self.frame.statement
        st.escape(frame.ret)  # a list the call returns outlives it
        if out is not None:
            st.env = dict(out.heap.pop(stash))
            st.heap = out.heap
            if out.grad != grad and node not in self.grad_funcs:
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
        spread = self.unknown_keywords is not None and self.unknown_keywords is frame.call_node  # `f(**cfg)`

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
        if positional and args and self.owner_of.get(node) is not None:
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

    # ----------------------------------------------------------------- facts helpers
    def loops_here(self) -> tuple:
        """Every loop enclosing this point, through the calls that led here, outermost first."""
        return tuple(loop for fr in self.frames for loop in fr.loops)

    def current_function(self):
        for fr in reversed(self.frames):
            if fr.func is not None:
                return fr.func
        return None


def _line_now(frames: list[Frame]) -> int | None:
    """The line of the statement of the analysed file being executed (the one that called
    into a workspace module, when that module's code runs); None before the first."""
    for fr in reversed(frames):
        if fr.module is None and fr.statement is not None:
            return fr.statement.lineno
    return None


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


def _forwards(node) -> bool:
    """Whether a function only passes its arguments on: a lambda, or a def whose body is one
    `return` of a call (`lambda t, y: func(t, y)`, `def my_func(self, x): return self.net(x)`)."""
    if isinstance(node, ast.Lambda):
        return True
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call)


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


def _is_generator(node) -> bool:
    if isinstance(node, ast.Lambda):
        return False
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _walk_own(node))

