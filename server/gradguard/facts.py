"""Facts the flow engine establishes and the rules query.

Each fact is about one place in the program (an AST node) and is recorded with the
abstract state that held there at the analysis fixpoint.  Rules turn facts into findings;
they never see the engine's internals beyond these records and `Region` descriptions.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from gradguard import ids
from gradguard.ids import gid
from gradguard.notebook import Cells, line_label
from gradguard.spans import Positions


def position(node) -> tuple:
    """Where a node is, as a sort key that never ties two nodes of one tree (a call and the
    call it starts with share their start): sets of nodes and regions iterate in an order
    that differs from run to run (string hashes are salted per process), so every choice
    among them is made in this order."""
    return node.lineno, node.col_offset, node.end_lineno or 0, node.end_col_offset or 0

@dataclass
class Region:
    """A part of an autograd graph: the nodes one expression created."""

    id: tuple
    node: ast.AST  # the expression that created it
    saves: bool = False  # it saved tensors for backward (freeing it matters)
    certain: bool = False  # its result certainly required grad (only such regions are reported)
    saved_objs: set = field(default_factory=set)  # storage ids it may have saved
    sure_saves: bool = False  # it saved a value that is surely a tensor (freeing it matters for sure)
    saved_sure: set = field(default_factory=set)  # storages it surely saved, each one runtime storage
    saved_as: dict = field(default_factory=dict)  # storage -> the names it was saved as ("weight", "result")
    modified: set = field(default_factory=set)  # names of its saved tensors an in-place op surely changed since
    stale: set = field(default_factory=set)  # the storages of those
    leaves: set = field(default_factory=set)  # storages of the leaves requiring grad it surely takes as input
    order: int = 0  # creation order: autograd runs later nodes first (the first failing one raises)
    saved_names: set = field(default_factory=set)  # what it saved, for messages ("result", "weight", ...)
    loops: tuple = ()  # the loop statements enclosing its creation, innermost last
    function: ast.AST | None = None  # the function whose body created it
    args: list = field(default_factory=list)  # [(arg node, regions the argument carried)]
    modules: set = field(default_factory=set)  # module objects whose parameters it used
    reaches: set | None = field(default_factory=set)  # storages requiring grad its inputs may come from (None: any)


@dataclass
class Backward:
    """A call that runs backward: `loss.backward()`, `torch.autograd.grad(...)`, ..."""

    node: ast.Call
    root: ast.AST | None  # the expression whose graph is backpropagated
    retain: bool | None  # retain_graph (None: not a literal)
    loops: tuple
    function: ast.AST | None
    regions: frozenset = frozenset()
    freed_hit: frozenset = frozenset()  # saving regions already freed: will raise freed_graph
    dirty_hit: frozenset = frozenset()  # saving regions whose saved tensors were modified in place
    no_grad_fn: bool = False  # the root certainly does not require grad
    # (name or `self.` attribute, "tensor" | "tuple" | "named_tuple" | "list") holding the stale regions here
    carriers: tuple = ()
    dirty_freed: frozenset = frozenset()  # freed regions also modified in place: keeping them would not help
    cuts: frozenset = frozenset()  # for a root without grad: where its graph was cut (detach, no_grad, ...)
    entry: ast.AST | None = None  # run inside an imported module: the call in the analysed file that led there


@dataclass
class Inplace:
    """An in-place modification of a tensor (`+=`, `x.add_()`, `x[i] = v`, `optimizer.step()`)."""

    node: ast.AST
    target: ast.AST | None  # the modified expression
    leaf_requires_grad: bool  # a leaf that requires grad, while grad mode is certainly on
    is_view_of_leaf: bool
    objs: frozenset = frozenset()
    loops: tuple = ()
    function: ast.AST | None = None
    entry: ast.AST | None = None  # run inside an imported module: the call in the analysed file that led there


@dataclass
class Step:
    """An optimizer step that changed parameters (their storage ids in `objs`)."""

    node: ast.AST
    objs: frozenset


@dataclass
class GradRead:
    """`.grad` read on a tensor that is certainly not a leaf and does not retain grad."""

    node: ast.Attribute


@dataclass
class Accumulation:
    """`total += loss` in a loop where `loss` carries a graph: keeps every iteration's graph alive."""

    node: ast.AugAssign
    region: tuple
    loops: tuple = ()  # keys of the enclosing loops: only a training loop (one that runs backward) counts


@dataclass
class LoopSteps:
    """A loop whose body runs backward and an optimizer step but never clears gradients."""

    loop: ast.AST
    step: ast.AST


@dataclass
class Raise:
    """An op that surely raises where it runs, for a reason the value in hand shows: `.numpy()`
    on a tensor that requires grad, a non-leaf given to an optimizer, `requires_grad` changed
    on a non-leaf.  `kind` is the `predicts` of the rule that reports it; `origin`, the nodes
    that gave the value the property that makes the op raise (where it became a non-leaf)."""

    kind: str
    node: ast.AST
    target: ast.AST | None  # the offending expression (the receiver, the tensor in the list)
    origin: tuple = ()
    function: ast.AST | None = None
    entry: ast.AST | None = None  # run inside an imported module: the call in the analysed file that led there
    in_place: bool = False  # the op changes `target` in place (not: it saves or reads it)
    from_loss: bool = False  # the value comes from a loss left unreduced (its fix averages it, as losses do)
    member: bool = False  # `target` holds the tensor (`model.parameters()`) rather than being it


@dataclass
class Facts:
    source: str
    tree: ast.Module
    regions: dict = field(default_factory=dict)  # id -> Region
    freed_by: dict = field(default_factory=dict)  # region id -> {backward call nodes}
    dirtied_by: dict = field(default_factory=dict)  # region id -> {in-place nodes}
    backwards: dict = field(default_factory=dict)  # key -> Backward
    inplaces: dict = field(default_factory=dict)  # key -> Inplace
    grad_reads: dict = field(default_factory=dict)
    accumulations: dict = field(default_factory=dict)
    loop_steps: dict = field(default_factory=dict)
    consumed_regions: set = field(default_factory=set)  # sites (region ids less the instance) some backward reached
    backward_loops: set = field(default_factory=set)  # keys of loops whose body ran a backward
    steps: dict = field(default_factory=dict)  # key -> Step
    raises: dict = field(default_factory=dict)  # key -> Raise
    grad_inputs: set = field(default_factory=set)  # source texts passed as `inputs` to torch.autograd.grad
    inplace_flags: dict = field(default_factory=dict)  # in-place call -> (call with inplace=True, flag position)
    # the facts about single nodes are keyed by their stable ids (`ids.gid`)
    values: dict = field(default_factory=dict)  # Name/Attribute node -> its tensor value, for hover
    maybe_none: set = field(default_factory=set)  # Name/Attribute nodes whose value may be None
    tuples: set = field(default_factory=set)  # Name/Attribute nodes whose value is a tuple (LSTM state)
    list_items: set = field(default_factory=set)  # `xs[i] += y` whose `xs` is surely a list (not a tensor)
    unreduced: set = field(default_factory=set)  # loss calls left unreduced (`reduction="none"`)
    cut_reach: dict = field(default_factory=dict)  # a cut (`.detach()`, no_grad) -> the storages its input reached

    modules: list = field(default_factory=list)  # the workspace modules the analysis read (workspace.Module)
    read: tuple = ()  # paths of workspace modules whose text decided what was analysed (see analysis._run)
    cells: Cells = ()  # a notebook's: where each cell starts in `source`, for the lines messages name
    _nodes: dict = field(default_factory=dict, repr=False)  # (scope, kinds) -> `nodes`

    def __getstate__(self) -> dict:
        """Without what is worked out again when asked (the walks, the parents, the positions)."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("parents", "positions")}
        state["_nodes"] = {}
        return state

    def add_module(self, module) -> None:
        """Nodes of an imported workspace module get that module's positions and text."""
        self.modules.append(module)
        self.__dict__.pop("parents", None)

    def module_of(self, node):
        """The imported module `node` belongs to, None for the file analysed."""
        if not self.modules:
            return None
        path = ids.module_of(gid(node))
        return next((m for m in self.modules if m.path == path), None) if path else None

    def nodes(self, scope=None, *kinds) -> list:
        """The nodes of `scope` (a function, a loop; the module when None) in `ast.walk`'s order,
        only those of `kinds` if any are given.  Listed once per scope and kinds: the fixes of
        the findings of one file look through the same scopes again and again, and a walk
        each time made a large file's rules take longer than its analysis."""
        scope = self.tree if scope is None else scope
        every = self._nodes.get((scope, ()))
        if every is None:
            every = self._nodes[(scope, ())] = list(ast.walk(scope))
        if not kinds:
            return every
        found = self._nodes.get((scope, kinds))
        if found is None:
            found = self._nodes[(scope, kinds)] = [n for n in every if isinstance(n, kinds)]
        return found

    @cached_property
    def parents(self) -> dict:
        """AST child -> parent, built only when a finding needs a fix that edits statements."""
        out = {}
        for tree in (self.tree, *(m.tree for m in self.modules)):
            for parent in ast.walk(tree):
                for child in ast.iter_child_nodes(parent):
                    out[child] = parent
        return out

    @cached_property
    def positions(self) -> Positions:
        return Positions(self.source)

    def foreign(self, node) -> bool:
        """Whether `node` is in an imported module rather than the file analysed."""
        return self.module_of(node) is not None

    def span(self, node):
        module = self.module_of(node)
        if module is None:
            return self.positions.span(node)
        return replace(module.positions.span(node), path=module.path)

    def line(self, node) -> str:
        """Where a node is, for a message: "line 12", "line 2 of cell 3" in a notebook, or
        "line 5 of features.py" in an imported module."""
        module = self.module_of(node)
        if module is None:
            return line_label(self.cells, node.lineno)
        return f"line {node.lineno} of {Path(module.path).name}"

    def text(self, node, limit: int = 50) -> str:
        module = self.module_of(node)
        seg = " ".join((self.positions if module is None else module.positions).segment(node).split())
        return seg if len(seg) <= limit else seg[: limit - 1] + "…"
