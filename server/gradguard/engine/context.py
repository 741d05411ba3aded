"""The state of one analysis, declared in one place: what the engine's parts share.

The interpreter is made of parts that each live in a module of their own (control flow in
`interp`, calls in `calls`, imports in `imports`, expressions in `exprs`, torch's semantics in
`torch_sem` and the modules it draws on); what they share while one module is analysed is
this `Context`, which each reads and writes as `self.cx`.  Every field is set here, with what
it holds, so a part can be read knowing the whole of the state it may touch.  `Frame` is one
activation of the call stack the context keeps (`frames`).
"""
from __future__ import annotations

import ast
import os
import re

from gradguard import knowledge as K
from gradguard.engine import binder
from gradguard.engine.limits import Clock, Limits
from gradguard.engine.state import GLOBALS
from gradguard.engine.values import EMPTY
from gradguard.facts import Facts
from gradguard.ids import number
from gradguard.spans import LINE_BREAK


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
        self.on_yield = None  # for a `@contextmanager` entered by a `with`: runs its body (see managers.py)
        self.closed_over = frozenset()  # the names of its function's closure (see `closure`)
        self.cells: dict = {}  # name -> heap object holding it: a `nonlocal` name (see `closure`)
        self.with_grads = []  # per enclosing `with` of this frame: the grad mode it restores on exit


class Context:
    """Everything one analysis of a module knows while it runs, besides the abstract state that
    flows through its statements (`state.State`)."""

    def __init__(self, source: str, tree: ast.Module, deadline: float | None = None, *, path: str = "<string>",
                 workspace=None, limits: Limits = Limits()):
        self.source = source
        self.limits = limits
        self.tree = number(tree, "") if not hasattr(tree, "gid") else tree
        self.frames: list[Frame] = []
        frames = self.frames  # not `self`: a clock holding the context would keep every analysis alive until gc
        self.clock = Clock(deadline, lambda: line_now(frames), limits.work)
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
        self.autocasts = 0  # autocast blocks being executed (see `op_result`: some ops save cast copies)
        self.entered_modes: list = []  # grad modes entered by `mode.__enter__()`: what `__exit__` restores
        self.managed_funcs: set = set()  # `@contextmanager` functions (see managers.py)
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
        self.comprehension_loops: dict = {}  # list comprehension -> the `for` loop it runs as (see `comprehension_loop`)
        self.unrolled_work = 1  # the product of the item counts of the loops being unrolled (see `unrolls`)
        self.statement_counts: dict = {}  # loop -> the statements of its body
        self.has_call: dict = {}  # expression -> whether a call is in it (see `Expressions.held`)


def line_now(frames: list[Frame]) -> int | None:
    """The line of the statement of the analysed file being executed (the one that called
    into a workspace module, when that module's code runs); None before the first."""
    for fr in reversed(frames):
        if fr.module is None and fr.statement is not None:
            return fr.statement.lineno
    return None
