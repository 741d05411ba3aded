"""Fix planning: which edits make a flagged program run, decided from the data flow.

Rules call these planners; the language server turns the chosen edits into libcst
changes (`findings.Edit` lists the kinds).  The first fix of each plan is the preferred
one.  The choices follow what the graph needs:

* a second loss that reuses a subgraph the first backward freed: cut the first loss off
  from the shared part with `.detach()` where gradients into it are wasted (the optimizer
  stepped after the first backward does not train it), otherwise keep the graph with
  `retain_graph=True` — and if an optimizer step changed weights the shared part saved,
  also detach those in the second loss;
* a value built before a loop and reused by every iteration's backward: build it under
  `torch.no_grad()` if the loss still has a graph without it, else rebuild it inside the loop;
* a value carried from the previous iteration: detach the carrier where it crosses;
* a saved tensor modified in place: use the out-of-place op, or run the optimizer step
  after the backward that still needs the old weights.
"""
from __future__ import annotations

import ast
from dataclasses import replace

from gradguard import knowledge as K
from gradguard.facts import Backward, Facts, position
from gradguard.findings import Edit, Fix
from gradguard.ids import gid

DETACHABLE = (ast.Name, ast.Attribute, ast.Subscript, ast.Call)


# ----------------------------------------------------------------- small helpers
def statement_of(facts: Facts, node: ast.AST) -> ast.stmt:
    while not isinstance(node, ast.stmt):
        node = facts.parents[node]
    return node


def edit(facts: Facts, kind: str, node: ast.AST, name: str = "", target: ast.AST | None = None) -> Edit | None:
    """The edit, or None where it would change an imported module (a fix edits the file checked)."""
    if facts.foreign(node) or target is not None and facts.foreign(target):
        return None
    return Edit(kind, facts.span(node), name, facts.span(target) if target is not None else None)


def ranked(fixes: list[Fix | None]) -> tuple[Fix, ...]:
    """Drop missing fixes, those with an edit that cannot be made, and duplicates; the first
    one left is preferred."""
    out: list[Fix] = []
    for f in fixes:
        if f is not None and f.edits and None not in f.edits and all(f.edits != g.edits for g in out):
            out.append(replace(f, preferred=not out))
    return tuple(out)


def before(a: ast.AST, b: ast.AST) -> bool:
    return (a.lineno, a.col_offset) < (b.lineno, b.col_offset)


def backward_fact(facts: Facts, node: ast.AST) -> Backward | None:
    return next((b for b in facts.backwards.values() if b.node is node), None)


def loop_carried_names(loop: ast.AST) -> set:
    """Names an iteration may read before assigning them: values from the previous iteration."""
    assigned = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        assigned -= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    exposed: set = set()

    def visit(body, definite: set):
        for stmt in body:
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    exposed.update(_loads(item.context_expr) - definite)
                visit(stmt.body, definite)
                continue
            if isinstance(stmt, (ast.For, ast.AsyncFor)) and not stmt.orelse:  # its target is set before its body
                exposed.update(_loads(stmt.iter) - definite)
                visit(stmt.body, definite | {n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name)})
                continue
            exposed.update(_loads(stmt) - definite)
            if isinstance(stmt, ast.AugAssign):  # `total += loss` reads `total` first
                exposed.update({n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name)} - definite)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    definite.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))

    visit(loop.body, set())
    return exposed & assigned


def _loads(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _sites(regions) -> set:
    """Region ids less their instance number: the same op, in any iteration."""
    return {r[:-1] for r in regions}


def stored_in_containers(facts: Facts, loop: ast.AST, regions: frozenset) -> list:
    """(container, value) of `bank.append(value)` calls in the loop (or module) whose value
    carries one of `regions` (of any iteration): a memory bank that keeps last iteration's
    graph, a rollout buffer that keeps the graphs of the values it collected."""
    sites = _sites(regions)
    out = []
    for call in ast.walk(loop):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.args \
                and call.func.attr in ("append", "appendleft", "insert", "add"):
            value = call.args[-1]
            t = facts.values.get(gid(value))
            if t is not None and sites & _sites(t.regions):
                out.append((call.func.value, value))
    return out


def stored_on_attributes(facts: Facts, regions: frozenset) -> list:
    """Assignments of a value to an attribute (`self.queue = torch.cat([keys, self.queue])`,
    `cached = self._emb = self.embed(x)`) that read a tensor carrying one of `regions` (of any
    iteration), and that nothing reads later in the function, each with that attribute: the
    object outlives the iteration, and so does the graph it holds."""
    out = []
    for stmt in facts.nodes(None, ast.Assign):
        for target in stmt.targets:
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
                target = target.value  # `self.memory[idx] = ...`: a memory bank written row by row
            if isinstance(target, ast.Attribute) and _carries(facts, stmt.value, regions) \
                    and not _read_after(facts, target, stmt):
                out.append((stmt, target))
                break
    return sorted(out, key=lambda pair: position(pair[0]))


def lists_on_attributes(facts: Facts, regions: frozenset) -> list:
    """Assignments `self.state = new_state` of a list named in the function (or a name assigned
    it) that the same function filled with values carrying one of `regions` (`new_state.append(h)`), and
    that nothing reads later in the function: the object keeps each element's graph past the
    iteration.  Each with a value appended, which tells what an element is (`(h, c)`)."""
    filled = {(_function_of(facts, call), call.func.value.id): call.args[-1] for call in facts.nodes(None, ast.Call)
              if isinstance(call.func, ast.Attribute) and call.func.attr in ("append", "insert")
              and isinstance(call.func.value, ast.Name) and call.args and _carries(facts, call.args[-1], regions)}
    names = [a for a in facts.nodes(None, ast.Assign) if len(a.targets) == 1 and isinstance(a.value, ast.Name)]
    for a in names:  # `state = new_state` in the loop over time steps: `state` holds the list too
        if isinstance(a.targets[0], ast.Name) and (_function_of(facts, a), a.value.id) in filled:
            filled[(_function_of(facts, a), a.targets[0].id)] = filled[(_function_of(facts, a), a.value.id)]
    return [(a, filled[(_function_of(facts, a), a.value.id)]) for a in names if isinstance(a.targets[0], ast.Attribute)
            and (_function_of(facts, a), a.value.id) in filled and not _read_after(facts, a.targets[0], a)]


def attribute_reentries(facts: Facts, regions: frozenset) -> list:
    """For each attribute a statement assigns a value carrying one of `regions` (`self.h = cell(x,
    self.h)`, `out, self.hidden = self.rnn(x, self.hidden)`): the reads of it, as a tensor,
    before that statement in its function, where the previous call's value comes back."""
    out = []
    for stmt in facts.nodes(None, ast.Assign):
        targets = [n for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Attribute)
                   and isinstance(n.ctx, ast.Store)]
        if not targets or not _carries(facts, stmt.value, regions):
            continue
        for target in targets:
            rhs = set(map(gid, ast.walk(stmt.value)))  # evaluated before the store, though written after it
            reads = [n for n in _reads_of(facts, facts.text(target, 200), _function_of(facts, stmt))
                     if (before(n, stmt) or gid(n) in rhs) and (t := facts.values.get(gid(n))) is not None
                     and t.rg is not False and not _may_be_none(facts, n)]
            if reads:
                out.append(sorted(reads, key=position))
    return out


def tuple_reentries(facts: Facts, regions: frozenset) -> list:
    """The first read, before the statement or in its value, of each attribute a statement
    assigns a tuple to in a function that built one of `regions` (`self._state =
    self._carry(state)` after `out, state = self.rnn(x, self._state)`; `out, self.hidden =
    self.lstm(x, self.hidden)`): where the previous call's `(h, c)` comes back."""
    out = []
    functions = {facts.regions[r].function for r in regions}  # where the freed graph was built
    for stmt in facts.nodes(None, ast.Assign):
        if len(stmt.targets) != 1 or _function_of(facts, stmt) not in functions \
                or not any(gid(n) in facts.tuples for n in ast.walk(stmt.value)):
            continue
        target = stmt.targets[0]  # `self._state = ...`, or `out, self.hidden = self.lstm(x, self.hidden)`
        rhs = set(map(gid, ast.walk(stmt.value)))  # evaluated before the store, though written after it
        for attr in target.elts if isinstance(target, ast.Tuple) else [target]:
            if not isinstance(attr, ast.Attribute):
                continue
            reads = [n for n in _reads_of(facts, facts.text(attr, 200), _function_of(facts, stmt))
                     if (before(n, stmt) or gid(n) in rhs) and gid(n) in facts.tuples]
            if reads:
                out.append(min(reads, key=position))
    return out


def _carries(facts: Facts, expr, regions: frozenset) -> bool:
    """Whether `expr` reads a tensor carrying one of `regions` (of any iteration), or computes
    one of them (`self._emb = self.embed(x)`)."""
    sites = _sites(regions)
    made = {gid(facts.regions[r].node) for r in regions if r in facts.regions}
    return any(gid(n) in made or t is not None and sites & _sites(t.regions)
               for n in ast.walk(expr)
               for t in [facts.values.get(gid(n)) if isinstance(n, (ast.Name, ast.Attribute)) else None])


def _read_after(facts: Facts, target: ast.expr, stmt: ast.stmt) -> bool:
    return bool(_reads_of(facts, facts.text(target, 200), _function_of(facts, stmt), start=_end(stmt)))


def _reads_of(facts: Facts, text: str, function, start: tuple = (0, 0), end: tuple | None = None) -> list:
    """The loads of the name or attribute written `text` in `function` (the module if None),
    from `start` up to `end` (line, column)."""
    return [n for n in facts.nodes(function, ast.Name, ast.Attribute) if isinstance(n.ctx, ast.Load)
            and start <= (n.lineno, n.col_offset) and (end is None or (n.lineno, n.col_offset) < end)
            and (n.id if isinstance(n, ast.Name) else facts.text(n, 200)) == text]


def _end(node) -> tuple:
    return node.end_lineno, node.end_col_offset


def _enclosing_block(facts: Facts, stmt: ast.AST) -> list | None:
    """The statement list (a body, an `else:`, a `finally:`) that holds `stmt`."""
    parent = facts.parents.get(stmt)
    return next((seq for field in ("body", "orelse", "finalbody")
                 if isinstance(seq := getattr(parent, field, None), list) and stmt in seq), None)


def initial_value(facts: Facts, name: str, loop: ast.AST) -> ast.AST | None:
    """What the last plain assignment before the loop, in the same body, gives `name` (so it
    exists at loop entry): its value expression, or None if there is none to see."""
    seq = _enclosing_block(facts, loop)
    for stmt in reversed(seq[: seq.index(loop)] if seq is not None else []):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and any(
                facts.text(t, 200) == name for t in (stmt.targets if isinstance(stmt, ast.Assign)
                                                     else [stmt.target])):
            return stmt.value
    return None


# ----------------------------------------------------------------- where to cut a graph
def cut_points(facts: Facts, ops, through: frozenset, within: frozenset, function) -> list[ast.AST]:
    """Arguments to `.detach()` so that the graphs of `ops` no longer reach `through`.

    A cut is an argument of one of `ops` written in `function` (the code that builds this
    loss, not a `forward` other losses share) that carries some of `through` and nothing
    outside `within` (it brings in only the shared part), of an op that keeps another
    input that requires grad (a module's parameters count), and that is not an input of
    `torch.autograd.grad`.  Of cuts on one path only the most upstream is kept."""
    found = []
    for rid in ops:
        region = facts.regions.get(rid)
        if region is None or _function_of(facts, region.node) is not function:
            continue
        for arg, carried in region.args:
            if not isinstance(arg, DETACHABLE) or not carried & through or not carried <= within:
                continue
            others = [c for a, c in region.args if a is not arg and any(facts.regions[r].certain for r in c
                                                                          if r in facts.regions)]
            if not (others or region.modules) or facts.text(arg) in facts.grad_inputs:
                continue
            found.append((rid, arg, carried))
    kept = []
    for rid, arg, carried in found:
        downstream = any(other_rid in carried for other_rid, _, _ in found if other_rid != rid)
        if not downstream and all(arg is not k for k in kept):
            kept.append(arg)
    return sorted(kept, key=position)


def _may_be_none(facts: Facts, read: ast.expr) -> bool:
    """Whether the value read may be None (`.detach()` would fail on it): the engine saw None
    there, and no earlier `if X is None: X = ...` of the same function replaced it."""
    if gid(read) not in facts.maybe_none:
        return False
    text = facts.text(read, 200)
    node = read
    while (parent := facts.parents.get(node)) is not None:  # `if X is None: ... else: <read>`
        is_none = _none_test(facts, parent.test, text) if isinstance(parent, ast.If) else None
        if is_none is not None and node in (parent.orelse if is_none else parent.body):
            return False
        node = parent
    for guard in facts.nodes(_function_of(facts, read), ast.If):
        if before(guard, read) and read not in set(ast.walk(guard)) \
                and _none_test(facts, guard.test, text) is True \
                and any(isinstance(a, ast.Assign) and any(facts.text(t, 200) == text for t in a.targets)
                        for a in guard.body):
            return False
    return True


def _none_test(facts: Facts, test, text: str) -> bool | None:
    """True for `text is None`, False for `text is not None`, None for any other test."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None \
            and facts.text(test.left, 200) == text:
        return isinstance(test.ops[0], ast.Is)
    return None


def _consumed_after(facts: Facts, first: ast.AST, b: Backward, shared: frozenset, within: frozenset) -> list:
    """Names passed to a call (`D_A(fake_A)`) between the first backward and `b`, in `b`'s
    function, that bring in only the first loss's graph, some of it shared: where the second
    loss can take them detached."""
    function = _function_of(facts, b.node)
    shared, within = _sites(shared), _sites(within)
    out = []
    for call in facts.nodes(function, ast.Call):
        if not (before(first, call) and before(call, b.node)
                and _function_of(facts, call) is function):
            continue
        for arg in call.args:
            t = facts.values.get(gid(arg)) if isinstance(arg, (ast.Name, ast.Attribute)) else None
            sites = _sites(t.regions) if t is not None else set()
            if t is not None and t.rg is True and sites & shared and sites <= within \
                    and not _may_be_none(facts, arg) and facts.text(arg) not in facts.grad_inputs:
                out.append(arg)
    return sorted(out, key=position)


def recurrences(facts: Facts, ops, hit: frozenset) -> list[ast.AST]:
    """Arguments through which a value from the previous iteration re-enters an op that
    made it (`h = cell(x, h)`, `self.mem = beta * self.mem + x`)."""
    found = []
    for rid in ops:
        region = facts.regions.get(rid)
        if region is None:
            continue
        for arg, carried in region.args:
            if isinstance(arg, DETACHABLE) and rid in carried and carried & hit and not _may_be_none(facts, arg):
                found.append(arg)
    return sorted(set(found), key=position)


def steps_between(facts: Facts, first: ast.AST, second: ast.AST, function) -> list:
    return [s for s in facts.steps.values()
            if before(first, s.node) and before(s.node, second) and _function_of(facts, s.node) is function]


def _function_of(facts: Facts, node):
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        node = facts.parents.get(node)
    return node


# ----------------------------------------------------------------- GG001
def freed_graph(facts: Facts, b: Backward, freeing: list) -> tuple[Fix, ...]:
    hit = b.freed_hit
    firsts = [n for n in freeing if n is not b.node]
    if firsts:
        return _two_losses(facts, b, firsts)
    loop = b.loops[-1] if b.loops else None
    if loop is None:
        return ranked([Fix("Keep the graph: `retain_graph=True`", (edit(facts, "retain_graph", b.node),))])
    outside = [facts.regions[r] for r in hit if loop not in facts.regions[r].loops]
    if outside:
        return _built_before_loop(facts, b, loop, outside)
    return _carried_from_previous_iteration(facts, b, loop)


def _two_losses(facts, b, firsts):
    first = max(firsts, key=position)
    fb = backward_fact(facts, first)
    shared = b.freed_hit
    fixes = []
    detach = None
    if fb is not None:
        cuts = cut_points(facts, fb.regions - b.regions, shared, b.regions, _function_of(facts, first))
        if cuts:
            names = ", ".join(f"`{facts.text(c)}`" for c in cuts)
            detach = Fix(f"Detach {names} in the loss backpropagated on {facts.line(first)}",
                         tuple(edit(facts, "detach", c) for c in cuts))
    retain = edit(facts, "retain_graph", first)
    if b.dirty_freed:  # an optimizer step changed weights the shared part saved: the second loss must not use them
        cuts = cut_points(facts, b.regions - fb.regions, b.dirty_freed, fb.regions,
                          _function_of(facts, b.node)) if fb else []
        keep = Fix(f"Keep the graph on {facts.line(first)} and detach "
                   + ", ".join(f"`{facts.text(c)}`" for c in cuts) + " here",
                   (retain, *(edit(facts, "detach", c) for c in cuts))) if cuts else None
    else:
        keep = Fix(f"Keep the graph: `retain_graph=True` on {facts.line(first)}", (retain,))
    stepped = steps_between(facts, first, b.node, _function_of(facts, b.node))
    modules = {m for r in b.freed_hit for m in facts.regions[r].modules}
    wasted = bool(stepped) and not any(("params", m) in s.objs for s in stepped for m in modules)
    if detach is not None and (wasted or keep is None):
        fixes = [detach, keep]
    else:
        fixes = [keep, detach]
    if fb is not None:  # or this loss takes the shared part detached (`D(fake.detach())` in a GAN's D step)
        here = cut_points(facts, b.regions - fb.regions, shared, fb.regions, _function_of(facts, b.node)) \
            or _consumed_after(facts, first, b, shared, fb.regions)
        if here:
            fixes.append(Fix("Detach " + ", ".join(f"`{facts.text(c)}`" for c in here) + " in this loss",
                             tuple(edit(facts, "detach", c) for c in here)))
        else:  # or the function of this loss takes it detached (`mdn_step(z, ...)` given the VAE's `z`)
            fixes += _received_detached(facts, b, shared)
    if stepped:  # keep the graph, and change the weights it saved only once both backwards ran
        here = statement_of(facts, b.node)
        moves = tuple(edit(facts, "move_after", statement_of(facts, s.node), target=here) for s in stepped)
        fixes.append(Fix(f"Keep the graph on {facts.line(first)} and run "
                         + ", ".join(f"`{facts.text(s.node)}`" for s in stepped) + " after this backward",
                         (retain, *moves)))
    return ranked(fixes)


def _received_detached(facts: Facts, b: Backward, shared: frozenset) -> list:
    """The parameters of the backward's function that bring in the shared part of the graph
    (`z`, computed by the step that already ran its backward), detached on entry (the
    re-analysis drops the fix if the loss then has no graph left)."""
    function = _function_of(facts, b.node)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    sites = _sites(shared)
    names = []
    for a in function.args.args:
        reads = [facts.values.get(gid(n)) for n in _reads_of(facts, a.arg, function)]
        if reads and all(t is not None and _sites(t.regions) & sites for t in reads):
            names.append(a.arg)
    body = function.body
    first = body[1] if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        else body[0]  # after a docstring
    return [Fix("Detach " + ", ".join(f"`{n}`" for n in names) + f" where `{function.name}` receives it",
                tuple(edit(facts, "detach_before", first, n) for n in names))] if names else []


def _built_before_loop(facts, b, loop, outside):
    # a rollout buffer that stored the critic's values with their graph (`self.values.append(value)`)
    stored = [Fix(f"Store `{facts.text(value)}` in `{facts.text(container)}` detached", (edit(facts, "detach", value),))
              for container, value in stored_in_containers(facts, facts.tree, frozenset(r.id for r in outside))[:1]]
    return ranked([*_uncached(facts, b.freed_hit), *_rebuilt(facts, b, loop, outside), *stored,
                   Fix("Keep the graph: `retain_graph=True`", (edit(facts, "retain_graph", b.node),))])


def _rebuilt(facts, b, loop, outside) -> list:
    """For values built before `loop` from `outside` regions: build them under no_grad when
    nothing trains through them, rebuild them in every iteration when an optimizer stepped
    in the loop trains the modules that made them."""
    function = _function_of(facts, loop)
    stmts = []
    for region in sorted(outside, key=lambda r: (position(r.node), r.order)):
        s = _statement_in(facts, region, function)
        if s is not None and s not in stmts and not any(s in ast.walk(t) for t in stmts):
            stmts.append(s)
    if not stmts:
        return []
    still_has_graph = any(loop in facts.regions[r].loops and facts.regions[r].certain
                          for r in b.regions if r in facts.regions)
    modules = {m for r in outside for m in r.modules}
    trained = any(("params", m) in s.objs for s in facts.steps.values() if loop in _loops_of(facts, s.node)
                  for m in modules)
    what = facts.text(stmts[0], 40)
    no_grad = Fix(f"Compute `{what}` under `torch.no_grad()` (it gets no gradient)",
                  tuple(edit(facts, "no_grad", s) for s in stmts)) if still_has_graph else None
    move = Fix(f"Recompute `{what}` in every iteration",
               tuple(edit(facts, "move_into_loop", s, target=loop.body[0]) for s in stmts)) \
        if all(_movable(facts, s, loop) for s in stmts) else None
    called = all(isinstance(s, ast.Expr) for s in stmts)  # a call run for its effect (a warm-up, a cache fill)
    return [move, no_grad] if trained and not called or no_grad is None else [no_grad, move]


def _movable(facts: Facts, stmt: ast.stmt, loop: ast.AST) -> bool:
    """Whether `stmt` can move to the top of `loop`'s body: nothing between them reads what
    it assigns (`losses = [...]` before `for loss in losses:` cannot move into that loop).  A
    call statement (`self._forward_all(x)`, filling the object's state) assigns no name."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return True
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return False
    names = {n.id for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
             for n in ast.walk(t) if isinstance(n, ast.Name)}
    return not any(_reads_of(facts, name, _function_of(facts, loop), start=_end(stmt), end=position(loop.body[0])[:2])
                   for name in names)


def _statement_in(facts: Facts, region, function) -> ast.stmt | None:
    """The statement of `function` that builds `region`: its own, or the call leading to it."""
    if _function_of(facts, region.node) is function:
        return statement_of(facts, region.node)
    call = _call_in(facts, _call_chain(region.id), function)
    return statement_of(facts, call) if call is not None else None


def _call_chain(key: tuple) -> tuple:
    """The ids of the calls an engine key (of a region, a backward) was made under, outermost first."""
    return key[0] if key and isinstance(key[0], tuple) else ()


def _call_in(facts: Facts, chain: tuple, function) -> ast.Call | None:
    """The call of `chain` written in `function` itself: where its code leads to what a
    callee did."""
    calls = {gid(n): n for n in facts.nodes(function, ast.Call)}
    return next((calls[c] for c in chain if c in calls and _function_of(facts, calls[c]) is function), None)


def _loops_of(facts: Facts, node) -> list:
    out = []
    while node is not None:
        node = facts.parents.get(node)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            out.append(node)
    return out


def _carried_from_previous_iteration(facts, b, loop):
    fixes = _uncached(facts, b.freed_hit)
    carried = loop_carried_names(loop)
    # a local read before it is assigned in the loop, or an attribute of `self` (it outlives the iteration)
    for name, shape in [c for c in b.carriers if c[0] in carried or c[0].startswith("self.")][:1]:
        initial = initial_value(facts, name, loop)
        form = "detach_named_tuple" if shape == "named_tuple" else \
            "detach_tuple" if shape == "tuple" or isinstance(initial, ast.Tuple) else \
            "detach_list" if shape == "list" else "detach"
        if initial is not None:
            # the first iteration sees what was assigned before the loop: `h = None`, `total = 0`
            guarded = isinstance(initial, ast.Constant)
            fixes.append(Fix(f"Detach `{name}` at the start of each iteration",
                             (edit(facts, form + ("_if" if guarded else "") + "_before", loop.body[0], name),)))
        else:
            fixes.append(Fix(f"Detach `{name}` after the backward",
                             (edit(facts, form + "_after", statement_of(facts, b.node), name),)))
    cuts = recurrences(facts, b.regions, b.freed_hit)
    if cuts:
        fixes.append(Fix(f"Detach `{facts.text(cuts[0])}` where the previous iteration's value comes back",
                         (edit(facts, "detach", cuts[0]),)))
    for container, value in stored_in_containers(facts, loop, b.freed_hit)[:1]:
        fixes.append(Fix(f"Store `{facts.text(value)}` in `{facts.text(container)}` detached",
                         (edit(facts, "detach", value),)))
    for stmt, target in stored_on_attributes(facts, b.freed_hit)[:2]:
        fixes.append(Fix(f"Store `{facts.text(target)}` detached", (edit(facts, "detach", stmt.value),)))
    for stmt, item in lists_on_attributes(facts, b.freed_hit)[:1]:
        # an element is a tensor, or a tuple: `(h, c)` with its names, or one of names not written
        parts = item.elts if isinstance(item, ast.Tuple) else ()
        names = [p.id for p in parts if isinstance(p, ast.Name)]
        form = "" if not parts else ",".join(names) if len(set(names)) == len(parts) else "tuple"
        fixes.append(Fix(f"Store the items of `{facts.text(stmt.targets[0])}` detached",
                         (edit(facts, "detach_each", stmt.value, form),)))
    first: dict = {}  # per attribute, the reads its first assignment brings back
    for reads in sorted(attribute_reentries(facts, b.freed_hit), key=lambda reads: position(reads[0])):
        first.setdefault(facts.text(reads[0], 200), reads)
    reentries = list(first.values())
    if reentries:  # every attribute that brings a previous graph back: a KV cache's keys and values
        names = list(dict.fromkeys(facts.text(reads[0]) for reads in reentries))
        fixes.append(Fix("Detach " + ", ".join(f"`{n}`" for n in names[:3]) + (" ..." if len(names) > 3 else "")
                         + " where the previous value comes back",
                         tuple(edit(facts, "detach", r) for r in dict.fromkeys(r for reads in reentries for r in reads))))
    for read in tuple_reentries(facts, b.freed_hit)[:1]:  # an LSTM's `(h, c)` kept on the object
        form = "detach_tuple_if_before" if gid(read) in facts.maybe_none else "detach_tuple_before"
        fixes.append(Fix(f"Detach `{facts.text(read)}` where the previous value comes back",
                         (edit(facts, form, statement_of(facts, read), facts.text(read, 200)),)))
    state = object_state(facts, b.freed_hit, loop)
    if state:  # truncated backpropagation: the object's state enters each iteration detached
        fixes.append(Fix("Detach " + ", ".join(f"`{name}`" for name, _ in state) + " at the start of each iteration",
                         tuple(edit(facts, form, loop.body[0], name) for name, form in state)))
    fixes.append(Fix("Keep the graph: `retain_graph=True`", (edit(facts, "retain_graph", b.node),)))
    return ranked(fixes)


def _uncached(facts: Facts, regions: frozenset) -> list:
    """A lazily filled cache (`if self._cache is None: self._cache = self.mlp(pos)`) keeps the
    graph of its first computation, which the first backward frees: compute it on every
    call instead, so each iteration has its own graph (and current weights)."""
    fixes = []
    for rid in sorted(regions):
        stmt = statement_of(facts, facts.regions[rid].node)
        guard = facts.parents.get(stmt)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute) \
                and isinstance(guard, ast.If) and not guard.orelse \
                and _none_test(facts, guard.test, facts.text(stmt.targets[0], 200)):
            fixes.append(Fix(f"Compute `{facts.text(stmt.targets[0])}` on every call instead of caching it",
                             (edit(facts, "unwrap", guard),)))
    return fixes[:1]


def object_state(facts: Facts, regions: frozenset, loop: ast.AST) -> list:
    """(`model.state`, insert kind) for each attribute a method assigns from one of `regions`
    (`self.state = self.cell(x, self.state)`, a KV cache grown by `torch.cat`), where the
    loop's own code calls that method on `model`: the object keeps the graph across
    iterations.  The kind detaches a tensor or each tensor of a tuple, past a None."""
    function = _function_of(facts, loop)
    out: dict = {}
    for rid in sorted(regions):
        region = facts.regions[rid]
        method = _function_of(facts, region.node)
        chain = _call_chain(rid)
        call = _call_in(facts, chain, function)
        if call is None or method is None or not method.args.args or method.args.args[0].arg != "self" \
                or chain[-1] != gid(call):
            continue  # the loop's code calls the method itself, not something that calls it
        # `model.step(x)`: the object is `model`; `self.model(x)`: the module called is `self.model`
        named = isinstance(call.func, ast.Attribute) and call.func.attr == method.name
        owner = call.func.value if named else call.func
        if not isinstance(owner, (ast.Name, ast.Attribute)):
            continue
        own = statement_of(facts, region.node)
        stores = [a for a in ast.walk(method) if isinstance(a, ast.Assign) and _function_of(facts, a) is method
                  and (a is own or _carries(facts, a.value, regions))]
        for target in [n for a in stores for t in a.targets for n in ast.walk(t) if isinstance(n, ast.Attribute)
                       and isinstance(n.value, ast.Name) and n.value.id == "self" and isinstance(n.ctx, ast.Store)]:
            reads = _reads_of(facts, facts.text(target, 200), method)
            shape = "detach_tuple" if any(gid(n) in facts.tuples for n in reads) else \
                "detach" if any(gid(n) in facts.values for n in reads) else None
            if shape is not None:
                guarded = any(gid(n) in facts.maybe_none for n in reads)
                out.setdefault(f"{facts.text(owner, 200)}.{target.attr}", shape + ("_if" if guarded else "") + "_before")
    return list(out.items())


# ----------------------------------------------------------------- GG002
def inplace_saved(facts: Facts, b: Backward, changers: list) -> tuple[Fix, ...]:
    fixes = []
    flags = list(dict.fromkeys(facts.inplace_flags[n] for n in changers if n in facts.inplace_flags))
    if flags:  # `nn.ReLU(inplace=True)`, `F.relu(x, inplace=True)`: every one that changed a saved tensor
        names = ", ".join(f"`{facts.text(call, 40)}`" for call, _ in flags[:2]) + (" ..." if len(flags) > 2 else "")
        fixes.append(Fix(f"Turn off the in-place mode of {names}: `inplace=False`",
                         tuple(edit(facts, "inplace_false", call, "" if position is None else str(position))
                               for call, position in flags), applicability="safe"))
    first = [n for n in changers if n not in facts.inplace_flags][:1]
    steps = [n for n in changers if n not in facts.inplace_flags and _is_step(n)] if first and _is_step(first[0]) \
        else []
    if steps:
        moves = [m for m in (_step_moved(facts, b, n) for n in steps) if m is not None]
        if moves:  # (a step after the backward changed the weights on the previous iteration)
            fixes.append(Fix(" and ".join(f"Run `{facts.text(moved, 60)}` after `{facts.text(target, 60)}`"
                                          for moved, target in dict.fromkeys(moves))
                             + ": that backward still needs the old weights",
                             tuple(edit(facts, "move_after", moved, target=target)
                                   for moved, target in dict.fromkeys(moves))))
        else:
            fixes.append(_accumulated(facts, b, steps[0]))
    for n in first if not steps else ():
        stmt = statement_of(facts, n)
        top = _chain_top(facts, n) if isinstance(n, ast.Call) else n  # a whole chain is rewritten from its last call
        if isinstance(n, ast.AugAssign) or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                                               and K.has_out_of_place(n.func.attr)
                                               and (_whole_statement(facts, top) or _unobserved(facts, n))):
            fixes.append(Fix("Use the out-of-place operation",
                             (edit(facts, "out_of_place", top if _whole_statement(facts, top) else n,
                                   "item" if gid(n) in facts.list_items else ""),), applicability="safe"))
        elif (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)  # `x[i] = v`, `sim.fill_diagonal_(0)`
              or isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
              and n.func.attr.endswith("_")) and _computed_here(facts, n.value if isinstance(n, ast.Subscript)
                                                                 else n.func.value, stmt):
            name = (n.value if isinstance(n, ast.Subscript) else n.func.value).id
            fixes.append(Fix(f"Modify a copy: `{name} = {name}.clone()` first",
                             (edit(facts, "clone_before", stmt, name),), applicability="safe"))
    # or the op saves a copy: the queue it reads is pushed to in place afterwards; a weight too when
    # a step is not the first to change it (an embedding's max_norm renormalizing it in its lookup)
    operands = saved_operands(facts, b, weights=bool(changers) and not _is_step(changers[0]))
    if operands:
        fixes.append(Fix("Save a copy for backward: " + ", ".join(f"`{facts.text(o)}.clone()` in `{facts.text(op, 40)}`"
                                                              for o, op in operands[:2]),
                         tuple(edit(facts, "clone", o) for o, _ in operands), applicability="safe"))
    loop = b.loops[-1] if b.loops else None
    outside = [facts.regions[r] for r in b.dirty_hit if loop is not None and loop not in facts.regions[r].loops]
    if outside:  # built before the loop, changed by an iteration's step, needed again by the next one
        fixes += _rebuilt(facts, b, loop, outside)
    cuts = cut_points(facts, b.regions, b.dirty_hit, b.regions, _function_of(facts, b.node))
    if cuts:
        fixes.append(Fix("Detach " + ", ".join(f"`{facts.text(c)}`" for c in cuts) + " (no gradient through it)",
                         tuple(edit(facts, "detach", c) for c in cuts)))
    return ranked(fixes)


def _owner_of_attribute(facts: Facts, node) -> bool:
    """`items` in `items.weight`: it holds the operand, it is not one (a method's receiver,
    `items.weight` in `items.weight.t()`, is)."""
    parent = facts.parents.get(node)
    return isinstance(parent, ast.Attribute) and not (isinstance(facts.parents.get(parent), ast.Call)
                                                      and facts.parents[parent].func is parent)


def saved_operands(facts: Facts, b: Backward, weights: bool = False) -> list:
    """(operand, op): the operands holding a storage that an op saved and an in-place op then
    surely changed (the queue in `torch.einsum("nc,ck->nk", [q, queue.keys])`, pushed to
    before the backward).  Not parameters, unless `weights`: after a step a copy would make
    the backward compute gradients of weights the step already replaced."""
    out = {}  # by operand: regions of several iterations are one op
    for r in sorted((facts.regions[r] for r in b.dirty_hit), key=lambda r: (position(r.node), r.order)):
        out |= {gid(o): (o, r.node) for o in facts.nodes(r.node, ast.Name, ast.Attribute)
                if isinstance(o.ctx, ast.Load) and not _owner_of_attribute(facts, o)
                and gid(o) in facts.values and facts.values[gid(o)].objs & r.stale
                and (weights or not any(obj[0] == "params" for obj in facts.values[gid(o)].objs))}
    return list(out.values())


def _step_moved(facts: Facts, b: Backward, step: ast.Call) -> tuple | None:
    """(statement, target): moving the statement that runs `step` to just after the target,
    which runs the backward `b`, lets that backward see the weights it saved.  In one function
    (`opt_q.step()` written before the policy's backward), or in the caller of both (a helper
    `_optimize(opt, loss)` called for the critic, then for the actor): their calls there."""
    stmt = statement_of(facts, step)
    target = _statement_reaching(facts, b, _function_of(facts, step))
    if target is not None and before(stmt, target):
        return stmt, target
    back = next((_call_chain(k) for k, fact in facts.backwards.items() if fact is b), None)
    calls = {gid(n): n for n in facts.nodes(facts.tree, ast.Call)}
    for key, fact in facts.steps.items():
        chain = _call_chain(key)
        if fact.node is not step or back is None:
            continue
        k = next((i for i, (x, y) in enumerate(zip(chain, back)) if x != y), min(len(chain), len(back)))
        mine, theirs = calls.get(chain[k]) if k < len(chain) else None, calls.get(back[k]) if k < len(back) else None
        if mine is None or theirs is None:
            continue
        moved, target = statement_of(facts, mine), statement_of(facts, theirs)
        parent = facts.parents.get(moved)
        if parent is facts.parents.get(target) and before(moved, target) and any(
                isinstance(block, list) and moved in block and target in block for block in vars(parent).values()):
            return moved, target
    return None


def _accumulated(facts: Facts, b: Backward, step: ast.Call) -> Fix | None:
    """A step inside the loop over pieces of one forward (micro-batches of one `logits`) changes
    weights the next piece's backward still needs: accumulate the pieces' gradients and step
    once after the loop, zeroing the gradients after that step instead of in each piece."""
    stmt, loop = statement_of(facts, step), next(iter(_loops_of(facts, step)), None)
    if loop is None or facts.parents.get(stmt) is not loop or not b.loops or b.loops[-1] is not loop \
            or not isinstance(loop, (ast.For, ast.AsyncFor)):
        return None
    pieces = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    if not any(isinstance(n, ast.Name) and n.id in pieces and isinstance(n.ctx, ast.Load)
               and _carries(facts, n, b.dirty_hit) for s in loop.body for n in ast.walk(s)):
        return None  # the loop does not iterate over pieces of the graph the step breaks
    owner = facts.text(step.func.value, 200)
    zeroing = [s for s in loop.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
               and _last_name(s.value.func) == "zero_grad" and isinstance(s.value.func, ast.Attribute)
               and facts.text(s.value.func.value, 200) == owner]
    return Fix(f"Accumulate the gradients of every piece and run `{facts.text(step)}` once, after the loop",
               (edit(facts, "move_after", stmt, target=loop),
                *(edit(facts, "move_after", z, target=loop) for z in zeroing[:1])))


def _computed_here(facts: Facts, name: ast.Name, stmt: ast.stmt) -> bool:
    """Whether `name` was last given, before `stmt` in its function, a tensor computed there
    (`sim = torch.exp(...)`): a copy of it then changes nothing anyone else sees, unlike a
    loop variable over `model.buffers()` or an argument (one given anew on every path, by a
    statement of the function's own body, `x = self.stem(x)` in `forward(self, x)`, is no
    longer the caller's)."""
    scope = _function_of(facts, stmt)
    binds = [n for n in facts.nodes(scope, ast.Name) if n.id == name.id
             and isinstance(n.ctx, ast.Store) and before(n, stmt) and _function_of(facts, n) is scope]
    if not binds:
        return False
    last = statement_of(facts, max(binds, key=position))  # `h = f(x)`, or `out, h = model(x, h)`
    if scope is not None and any(a.arg == name.id for a in scope.args.args) and facts.parents.get(last) is not scope:
        return False
    return isinstance(last, ast.Assign) and isinstance(last.value, (ast.Call, ast.BinOp, ast.UnaryOp))


def _whole_statement(facts: Facts, call: ast.Call) -> bool:
    stmt = facts.parents.get(call)
    return isinstance(stmt, ast.Expr) and stmt.value is call


def _chain_top(facts: Facts, call: ast.Call) -> ast.Call:
    """The last call of a chain of in-place methods holding `call` (`state.mul_(0.9).add_(h)`
    for `state.mul_(0.9)`): as a whole statement, it is one update of its receiver."""
    while True:
        attr = facts.parents.get(call)
        outer = facts.parents.get(attr)
        if not (isinstance(attr, ast.Attribute) and isinstance(outer, ast.Call) and outer.func is attr
                and K.has_out_of_place(attr.attr)):
            return call
        call = outer


def _unobserved(facts: Facts, call: ast.Call) -> bool:
    """Whether the tensor an in-place call inside an expression modifies (`code = h.sigmoid_()`,
    `std.mul_(eps).add_(mu)`) is seen by no one else, so the out-of-place call computes the
    same: a temporary, or a local name that is neither read after the statement nor carried
    to the next iteration of a loop."""
    receiver = call.func.value
    if not isinstance(receiver, (ast.Name, ast.Attribute, ast.Subscript)):
        return True
    if not isinstance(receiver, ast.Name):
        return False
    if _reads_of(facts, receiver.id, _function_of(facts, call), start=_end(statement_of(facts, call))):
        return False
    return not any(receiver.id in loop_carried_names(loop) for loop in _loops_of(facts, call)
                   if _function_of(facts, loop) is _function_of(facts, call))


def _statement_reaching(facts: Facts, b: Backward, function) -> ast.stmt | None:
    """The statement of `function` that runs the backward `b` (it, or a call leading to it)."""
    if _function_of(facts, b.node) is function:
        return statement_of(facts, b.node)
    for key, fact in facts.backwards.items():
        call = _call_in(facts, _call_chain(key), function) if fact is b else None
        if call is not None:
            return statement_of(facts, call)
    return None


def _is_detach(node) -> bool:
    """`x.detach()` or `x.data`: where a graph was cut by hand."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" \
        or isinstance(node, ast.Attribute) and node.attr == "data"


def _remove_detach(facts: Facts, cut) -> Fix:
    return Fix(f"Keep the graph: remove `{facts.text(cut)}`'s detach on {facts.line(cut)}",
               (edit(facts, "remove_detach", cut),))


def _is_step(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"


# ----------------------------------------------------------------- GG004
def no_grad_fn(facts: Facts, b: Backward) -> tuple[Fix, ...]:
    """Undo what cut the graph: a `.detach()`, a no_grad block or decorator, a freeze; an
    argmax whose index the loss uses as a number becomes a soft-argmax, every one on the
    path at once.  Other non-differentiable ops (a comparison, an integer cast) have no
    mechanical fix."""
    fixes = []
    cuts = sorted(b.cuts, key=position)
    argmaxes = [c for c in cuts if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and c.func.attr in ("argmax", "argmin")]
    soft = [e for c in cuts for e in soft_comparisons(facts, c) if e is not None]
    if soft:
        fixes.append(Fix("Compare softly: use the probabilities instead of the hard "
                         + ("mask" if any(e.target is None for e in soft) else "one-hot of the argmax"), tuple(soft)))
    if argmaxes:
        fixes.append(Fix("Use a differentiable soft-argmax (the expected index under a softmax) for "
                         + ", ".join(f"`{facts.text(c, 40)}`" for c in argmaxes[:2])
                         + (" ..." if len(argmaxes) > 2 else ""),
                         tuple(edit(facts, "soft_argmax", c) for c in argmaxes)))
    for cut in cuts:
        if _is_detach(cut):
            fixes.append(_remove_detach(facts, cut))
        elif _is_autograd_grad(facts, cut):  # and every other derivative taken there: PINN residuals chain them
            calls = [c for c in facts.nodes(_function_of(facts, cut), ast.Call) if _is_autograd_grad(facts, c)
                     and _function_of(facts, c) is _function_of(facts, cut)
                     and not any(k.arg == "create_graph" for k in c.keywords)]
            fixes.append(Fix(f"Differentiate the gradients of {facts.line(cut)}: `create_graph=True`",
                             tuple(edit(facts, "create_graph", c) for c in sorted(set(calls) | {cut}, key=position))))
        elif isinstance(cut, ast.Call) and _last_name(cut.func) == "set_grad_enabled" \
                and isinstance(facts.parents.get(cut), ast.Expr):
            fixes.append(Fix(f"Record gradients: remove `{facts.text(cut)}` on {facts.line(cut)}",
                             (edit(facts, "delete", facts.parents[cut]),)))
        elif _copies_tensor(facts, cut):
            fixes.append(Fix(f"Keep the graph: `{facts.text(cut.func.value)}.as_tensor` gives the tensor itself "
                             f"(converted if need be) where `{facts.text(cut.func)}` copies its values",
                             (edit(facts, "replace", cut.func, f"{facts.text(cut.func.value)}.as_tensor"),)))
        elif isinstance(cut, (ast.With, ast.AsyncWith)) and len(cut.items) == 1 and cut in facts.parents:
            fixes.append(Fix(f"Compute it with gradients: take it out of the `no_grad` block on {facts.line(cut)}",
                             (edit(facts, "unwrap", cut),)))
        elif isinstance(cut, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in cut.decorator_list:
                if "no_grad" in facts.text(deco) or "inference_mode" in facts.text(deco):
                    fixes.append(Fix(f"Record gradients in `{cut.name}`: remove `@{facts.text(deco)}`",
                                     (edit(facts, "delete", deco),)))
        elif isinstance(cut, ast.stmt) and (loaded := _pretrained_frozen(facts, cut)) is not None:
            fixes.append(Fix(f"Train the pretrained weights: `freeze=False` in `{facts.text(loaded, 40)}`",
                             (edit(facts, "freeze_false", loaded),), applicability="safe"))
        elif isinstance(cut, ast.stmt):  # froze every parameter the loss depends on
            target = cut
            parent = facts.parents.get(cut)
            if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.body == [cut]:
                target = parent
            fixes.append(Fix(f"Keep the parameters trainable: remove `{facts.text(target, 40)}`",
                             (edit(facts, "delete", target),)))
    copies = [c for c in cuts if isinstance(c, ast.Call) and _copies_values(c)]
    for wrap in copies[:1]:
        fixes.append(Fix(f"Keep the graph: `torch.stack` the tensors instead of copying them with "
                         f"`{facts.text(wrap, 30)}`", (edit(facts, "stack", wrap),)))
    for wrap, items in [(w, i) for w, i in rewrapped_items(facts, b) if w not in copies][:1]:
        if not items:
            fixes.append(Fix(f"Keep the graph: `torch.stack` the tensors instead of copying them with "
                             f"`{facts.text(wrap, 30)}`", (edit(facts, "stack", wrap),)))
        elif items == [wrap.args[0]]:
            fixes.append(Fix(f"Keep the graph: use `{facts.text(items[0].func.value, 30)}` itself, not a new tensor "
                             "of its `.item()`", (edit(facts, "unwrap_item", wrap),)))
        else:
            fixes.append(Fix(f"Keep the losses as tensors: `torch.stack` them instead of `{facts.text(wrap, 30)}` "
                             "of their `.item()`",
                             (edit(facts, "stack", wrap), *(edit(facts, "remove_item", i) for i in items))))
    copies = numpy_copies(facts, b)
    if copies:  # hard examples picked through numpy: index the tensors themselves
        fixes.append(Fix("Keep the graph: index the tensors themselves, not copies made through numpy",
                         tuple(edit(facts, "unwrap_numpy", c) for c in copies)))
    ported = numpy_round_trips(facts, b)
    if ported:
        names = [f"`{n.name}`" for n in ported if isinstance(n, ast.FunctionDef)] or [facts.line(ported[0])]
        fixes.append(Fix(f"Compute {', '.join(names[:2])} with torch instead of numpy, so the loss keeps its graph",
                         tuple(edit(facts, "to_torch", n) for n in ported)))
    leaves = trainable_leaves(facts, b)
    if leaves:  # all of them: the optimizer is meant to train each one
        fixes.append(Fix("Make " + ", ".join(f"`{name}`" for name, _ in leaves[:3]) + (" ..." if len(leaves) > 3 else "")
                         + " require grad where made: `.requires_grad_()`",
                         tuple(edit(facts, "requires_grad_after", stmt, name) for name, stmt in leaves)))
    return ranked(fixes)


_EQUALITY = (ast.Eq, ast.NotEq)
_ORDER = (ast.Gt, ast.GtE, ast.Lt, ast.LtE)
_CASTS = ("float", "double", "half")


def soft_comparisons(facts: Facts, cut: ast.AST) -> list[Edit]:
    """Edits that make a hard decision the loss was computed from differentiable: a mask
    `(p > 0.5).float()` becomes the probability `p` (a logit `z > 0`: `z.sigmoid()`), and
    `(x.argmax(1) == y).float()` the probability softmax(x) gives class y.  Only a
    comparison used as a number (cast, or in arithmetic) is rewritten, never one that indexes."""
    if isinstance(cut, ast.Compare) and len(cut.ops) == 1 and isinstance(cut.ops[0], _ORDER):
        sides = [s for s in (cut.left, cut.comparators[0]) if not _number(s)]
        if len(sides) == 2:  # `x > threshold`: the side that is a tensor
            sides = [s for s in sides if gid(s) in facts.values]
        if len(sides) != 1:
            return []
        kind = "prob" if _probability(facts, sides[0]) else "logit"
        around = _used_as_number(facts, cut)
        return [edit(facts, "soft_compare", around, kind)] if around is not None else []
    if not (isinstance(cut, ast.Call) and _last_name(cut.func) == "argmax"):
        return []
    parent, name = facts.parents.get(cut), ""
    if isinstance(parent, ast.Compare):
        compares = [parent]
    elif isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name, scope, x = parent.targets[0].id, _function_of(facts, cut), _argmax_input(facts, cut)
        stores = [n for n in facts.nodes(scope, ast.Name) if isinstance(n.ctx, ast.Store)
                  and _function_of(facts, n) is scope and (n.id == name or n.id == getattr(x, "id", None)
                                                           and before(parent, n))]
        if not isinstance(x, ast.Name) or len(stores) != 1:  # the compare must see the argmax's input as it was
            return []
        compares = [n for n in facts.nodes(scope, ast.Compare) if before(parent, n)
                    and _function_of(facts, n) is scope
                    and any(isinstance(s, ast.Name) and s.id == name for s in (n.left, *n.comparators))]
    else:
        return []
    out = []
    for c in compares:
        around = _used_as_number(facts, c) if len(c.ops) == 1 and isinstance(c.ops[0], _EQUALITY) else None
        if around is not None:
            out.append(edit(facts, "soft_compare", around, name, target=cut))
    return out


def _argmax_input(facts: Facts, call: ast.Call):
    """X in `X.argmax(...)` or `torch.argmax(X, ...)`."""
    owner = call.func.value
    imported = isinstance(owner, ast.Name) and any(
        (a.asname or a.name.split(".")[0]) == owner.id for n in facts.nodes(None, ast.Import, ast.ImportFrom)
        for a in n.names)
    return (call.args[0] if call.args else None) if imported else owner


def _number(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _probability(facts: Facts, node) -> bool:
    """Whether `node` is a sigmoid's or softmax's result (so in [0, 1]): the call, or a name
    given one once in its function."""
    if isinstance(node, ast.Name):
        scope = _function_of(facts, node)
        values = [a.value for a in facts.nodes(scope, ast.Assign)
                  if any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)
                  and _function_of(facts, a) is scope]
        node = values[0] if len(values) == 1 else None
    return isinstance(node, ast.Call) and _last_name(node.func) in ("sigmoid", "softmax")


def _used_as_number(facts: Facts, compare: ast.Compare):
    """The expression to rewrite for a comparison the program uses as a number: its cast
    (`(c).float()`), or the comparison itself inside arithmetic or a reduction."""
    parent = facts.parents.get(compare)
    if isinstance(parent, ast.Attribute):
        call = facts.parents.get(parent)
        if isinstance(call, ast.Call) and call.func is parent and parent.attr == "type" and len(call.args) == 1:
            return call  # `(c).type(x.dtype)`
        if isinstance(call, ast.Call) and call.func is parent and not call.args and not call.keywords:
            if parent.attr in _CASTS:
                return call
            if parent.attr in ("sum", "mean"):
                return compare
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return compare
    return None


def _copies_tensor(facts: Facts, cut) -> bool:
    """`torch.tensor(t)` of a name holding a tensor: a copy of its values, without its graph."""
    return isinstance(cut, ast.Call) and isinstance(cut.func, ast.Attribute) and cut.func.attr == "tensor" \
        and len(cut.args) == 1 and isinstance(cut.args[0], (ast.Name, ast.Attribute)) \
        and gid(cut.args[0]) in facts.values


def _copies_values(call: ast.Call) -> bool:
    """`torch.tensor(xs)`: a new tensor of the values of what it is given."""
    return _last_name(call.func) in ("tensor", "as_tensor", "Tensor", "FloatTensor") \
        and isinstance(call.func, ast.Attribute) and len(call.args) == 1 and not call.keywords


def rewrapped_items(facts: Facts, b: Backward) -> list:
    """(`torch.tensor(xs)`, the `.item()` calls that gave xs its numbers) in the backward's
    function: numbers taken out of the graph and put back in a new tensor without one; no
    calls when xs holds the tensors themselves (`torch.tensor` copies their values only)."""
    scope = _function_of(facts, b.node) or facts.tree
    out = []
    for call in facts.nodes(scope, ast.Call):
        if not _copies_values(call):
            continue
        arg = call.args[0]
        if _is_item(arg):  # torch.tensor(loss.item()): the loss itself
            out.append((call, [arg]))
            continue
        if isinstance(arg, (ast.List, ast.Tuple)):
            items = list(arg.elts)
        elif isinstance(arg, ast.Name):
            items = [c.args[0] for c in facts.nodes(scope, ast.Call) if len(c.args) == 1
                     and isinstance(c.func, ast.Attribute) and c.func.attr == "append"
                     and isinstance(c.func.value, ast.Name) and c.func.value.id == arg.id and before(c, call)]
        elif isinstance(arg, ast.Attribute):  # `policy.saved_log_probs`, filled by `self.saved_log_probs.append`
            items = [c.args[0] for c in facts.nodes(None, ast.Call) if len(c.args) == 1
                     and isinstance(c.func, ast.Attribute) and c.func.attr == "append"
                     and isinstance(c.func.value, ast.Attribute) and c.func.value.attr == arg.attr]
        elif isinstance(arg, ast.ListComp):
            items = [arg.elt]
        else:
            continue
        if items and all(_is_item(i) for i in items):
            out.append((call, items))
        elif items and all(_reads_graph(facts, i) for i in items):  # torch.tensor([l1, w * l2]): copies, no graph
            out.append((call, []))
    return out


def _called_before(facts: Facts, b: Backward) -> tuple:
    """(the backward's function, or the module; the names of what it calls before the backward)."""
    scope = _function_of(facts, b.node) or facts.tree
    return scope, {_last_name(c.func) for c in facts.nodes(scope, ast.Call) if before(c, b.node)}


def numpy_copies(facts: Facts, b: Backward) -> list:
    """`torch.from_numpy(x....numpy()[idx])` calls in the backward's function and in the
    functions it calls by name: copies of a tensor's values, without its graph."""
    scope, called = _called_before(facts, b)
    scopes = [scope, *(f for f in facts.nodes(None, ast.FunctionDef) if f.name in called)]
    out = []
    for s in scopes:
        for c in facts.nodes(s, ast.Call):
            arg = c.args[0] if len(c.args) == 1 and not c.keywords else None
            arg = arg.value if isinstance(arg, ast.Subscript) else arg
            if _last_name(c.func) == "from_numpy" and isinstance(arg, ast.Call) \
                    and isinstance(arg.func, ast.Attribute) and arg.func.attr == "numpy" and c not in out:
                out.append(c)
    return sorted(out, key=position)


def numpy_round_trips(facts: Facts, b: Backward) -> list:
    """What computes the loss through numpy, to be written with torch: a function the
    backward's function calls (by name) that takes a tensor to numpy (`.numpy()`) and wraps
    its result back (`torch.tensor(...)`); or, when the round trip spans the caller (`p =
    out.detach().numpy()`, `loss = torch.tensor(f(p, y.numpy()))`), the caller's statements
    on the loss's path and the numpy functions they call."""
    scope, called = _called_before(facts, b)
    functions = {f.name: f for f in facts.nodes(None, ast.FunctionDef)}
    whole = [f for name, f in functions.items() if name in called and _to_numpy(facts, f) and _from_numpy(facts, f)]
    if whole:
        return sorted(whole, key=position)
    if not isinstance(b.root, ast.Name):
        return []
    numpy = {a.asname or a.name for n in facts.nodes(None, ast.Import) for a in n.names
             if a.name == "numpy"}
    wraps = [a for a in facts.nodes(scope, ast.Assign) if before(a, b.node) and _from_numpy(facts, a)
             and any(isinstance(t, ast.Name) and t.id == b.root.id for t in a.targets)]
    if not wraps:
        return []
    path, todo = [], [max(wraps, key=position)]
    while todo:  # the statements of its block the wrap reads from, back to the tensors
        stmt = todo.pop()
        path.append(stmt)
        block = next((getattr(facts.parents.get(stmt), f) for f in ("body", "orelse")
                      if stmt in (getattr(facts.parents.get(stmt), f, None) or [])), [])
        reads = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for earlier in block[:block.index(stmt)]:
            if isinstance(earlier, ast.Assign) and earlier not in path and earlier not in todo \
                    and any(isinstance(t, ast.Name) and t.id in reads for t in earlier.targets) \
                    and (_to_numpy(facts, earlier) or _numpy_calls(earlier, functions, numpy)):
                todo.append(earlier)
    helpers = {f for stmt in path for f in _numpy_calls(stmt, functions, numpy)}
    return sorted([*path, *helpers], key=position) if any(_to_numpy(facts, s) for s in path) else []


def _to_numpy(facts: Facts, node) -> bool:
    return any(isinstance(c.func, ast.Attribute) and c.func.attr == "numpy" and not c.args
               for c in facts.nodes(node, ast.Call))


def _from_numpy(facts: Facts, node) -> bool:
    return any(isinstance(c.func, ast.Attribute) and c.func.attr in K.NUMPY_TO_TORCH.back_to_torch
               for c in facts.nodes(node, ast.Call))


def _numpy_calls(stmt, functions: dict, numpy: set) -> list:
    """The file's functions `stmt` calls whose body uses numpy (`np.log`)."""
    return [functions[c.func.id] for c in ast.walk(stmt) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            and c.func.id in functions and any(isinstance(n, ast.Name) and n.id in numpy
                                               for n in ast.walk(functions[c.func.id]))]


def _reads_graph(facts: Facts, expr) -> bool:
    """Whether `expr` reads a tensor that may require grad, or takes one from a distribution
    (`dist.log_prob(action)`), and calls no `.item()`."""
    nodes = list(ast.walk(expr))
    return not any(_is_item(n) for n in nodes) and any(
        (t := facts.values.get(gid(n))) is not None and t.rg is not False
        or isinstance(n, ast.Call) and _last_name(n.func) in K.DISTRIBUTIONS.graph_methods for n in nodes)


def _is_autograd_grad(facts: Facts, node) -> bool:
    return isinstance(node, ast.Call) and _last_name(node.func) == "grad" and "autograd" in facts.text(node.func)


def _is_item(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "item" \
        and not node.args and not node.keywords


def trainable_leaves(facts: Facts, b: Backward) -> list:
    """(name, its last assignment before use) of the tensors made without requires_grad that
    the program means to train: it gives them to an optimizer or reads their `.grad`."""
    uses = []
    for n in facts.nodes(None, ast.Call, ast.Attribute):
        if isinstance(n, ast.Call) and n.args and _last_name(n.func) in K.OPTIMIZERS:
            uses += _elements(facts, n.args[0])
        elif isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.value, ast.Name) \
                and isinstance(n.ctx, ast.Load):
            uses.append(n.value)
    out = []
    for use in sorted(uses, key=position):
        t = facts.values.get(gid(use))
        if t is None or t.rg is not False or t.leaf is not True or any(use.id == name for name, _ in out):
            continue
        scope = _function_of(facts, use) or facts.tree
        assigns = [a for a in facts.nodes(scope, ast.Assign) if before(a, use)
                   and any(isinstance(x, ast.Name) and x.id == use.id for x in a.targets)
                   and _function_of(facts, a) is _function_of(facts, use)]
        if assigns:
            out.append((use.id, max(assigns, key=position)))
    return out


def _pretrained_frozen(facts: Facts, stmt: ast.stmt) -> ast.Call | None:
    """The `nn.Embedding.from_pretrained(weights)` call of the statement that froze a layer by
    default (its `freeze` not given, or given as a keyword)."""
    for call in facts.nodes(stmt, ast.Call):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "from_pretrained" and len(call.args) <= 1 \
                and not any(isinstance(a, ast.Starred) for a in call.args) and not any(
                    k.arg is None for k in call.keywords):
            return call
    return None


def _last_name(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _elements(facts: Facts, node) -> list:
    """The names in a list or tuple literal, or in the one a name was last given before `node`."""
    if isinstance(node, ast.Name):
        scope = _function_of(facts, node) or facts.tree
        lists = [a.value for a in facts.nodes(scope, ast.Assign) if before(a, node)
                 and isinstance(a.value, (ast.List, ast.Tuple))
                 and any(isinstance(x, ast.Name) and x.id == node.id for x in a.targets)]
        node = max(lists, key=position) if lists else node
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e for e in node.elts if isinstance(e, ast.Name)]
    return []


# ----------------------------------------------------------------- other rules
def leaf_inplace(facts: Facts, node: ast.AST) -> tuple[Fix, ...]:
    """An in-place op whose result is what a lambda or a function returns (`Lambda(lambda x:
    x.mul_(1 / 255))` in a transform pipeline) computes the same out of place, where it runs;
    any other is wrapped in no_grad (`wrap_no_grad`)."""
    parent = facts.parents.get(node)
    returned = isinstance(parent, ast.Lambda) and parent.body is node or isinstance(parent, ast.Return)
    if returned and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and K.has_out_of_place(node.func.attr) and not node.func.attr.startswith("_"):
        return ranked([Fix("Return the out-of-place result", (edit(facts, "out_of_place", node),)),
                       *wrap_no_grad(facts, node)])
    return wrap_no_grad(facts, node)


def wrap_no_grad(facts: Facts, node: ast.AST) -> tuple[Fix, ...]:
    """Wrap the in-place statement, with the flagged statements next to it and the in-place
    changes of the same tensor that follow it (`delta += step; delta.clamp_(-eps, eps)`: torch
    stops at the first), in no_grad; a loop whose body is all such statements is wrapped
    whole (a weight-editing loop)."""
    flagged = {statement_of(facts, f.node) for f in facts.inplaces.values() if f.leaf_requires_grad}
    run = [statement_of(facts, node)]
    changed = _inplace_target(run[0])
    if changed is not None:
        parent, text = facts.parents.get(run[0]), facts.text(changed, 200)
        flagged |= {s for field in ("body", "orelse", "finalbody") for s in getattr(parent, field, None) or ()
                    if isinstance(s, ast.stmt) and (t := _inplace_target(s)) is not None and facts.text(t, 200) == text}
    while True:
        parent = facts.parents.get(run[0])
        body = _enclosing_block(facts, run[0])
        if body is None:
            break
        first, last = body.index(run[0]), body.index(run[-1])
        while first > 0 and body[first - 1] in flagged:
            first -= 1
        while last + 1 < len(body) and body[last + 1] in flagged:
            last += 1
        run = body[first:last + 1]
        if run != parent.body or not isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) or parent.orelse:
            break
        run = [parent]
    return ranked([Fix("Wrap it in `with torch.no_grad():`", tuple(edit(facts, "no_grad", s) for s in run),
                       applicability="safe")])


def _inplace_target(stmt: ast.stmt) -> ast.expr | None:
    """The tensor a statement changes in place: `x += y`, `x.clamp_(...)`, else None."""
    if isinstance(stmt, ast.AugAssign):
        return stmt.target
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr.endswith("_") \
            and not call.func.attr.startswith("_"):
        return call.func.value
    return None


def retain_grad(facts: Facts, read: ast.Attribute) -> tuple[Fix, ...]:
    if not isinstance(read.value, ast.Name):
        return ()
    name = read.value.id
    stmt = statement_of(facts, read)
    assigns = [n for n in facts.nodes(None, ast.Assign, ast.AugAssign, ast.AnnAssign)
               if before(n, stmt) and any(isinstance(t, ast.Name) and t.id == name
                                           for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    if not assigns:
        return ()
    last = max(assigns, key=position)
    return ranked([Fix(f"Call `{name}.retain_grad()` after it is computed", (edit(facts, "retain_grad", last, name),),
                       applicability="safe")])


def accumulate_item(facts: Facts, node: ast.AugAssign) -> tuple[Fix, ...]:
    """`total += loss.detach()`: the same values, still a tensor (code reading `total.item()`
    later keeps working); `total += loss.item()` makes it a float, offered second."""
    value = facts.text(node.value)
    return ranked([Fix(f"Accumulate `{value}.detach()`", (edit(facts, "detach", node.value),), applicability="safe"),
                   Fix(f"Accumulate `{value}.item()`", (edit(facts, "item", node.value),))])


def zero_grad(facts: Facts, loop: ast.AST, optimizer: str) -> tuple[Fix, ...]:
    return ranked([Fix(f"Call `{optimizer}.zero_grad()` at the start of each iteration",
                       (edit(facts, "zero_grad", loop.body[0], optimizer),))])


# ----------------------------------------------------------------- ops that refuse the tensor given
def numpy_detach(facts: Facts, r) -> tuple[Fix, ...]:
    """`t.numpy()` -> `t.detach().numpy()`; `np.asarray(t)` -> `np.asarray(t.detach())`; a list
    given to numpy (`np.array([a, b])`, `np.sum([x * y for ...])`) has each element detached."""
    if r.target is not None:
        array = r.node.right if isinstance(r.node, ast.BinOp) and r.node.left is r.target else None
        # `p - w` with `w` an ndarray: the array made a tensor keeps the arithmetic in torch, graph and all
        as_tensor = Fix(f"Make `{facts.text(array)}` a tensor (`torch.as_tensor`), so the arithmetic stays in torch",
                        (edit(facts, "replace", array, f"torch.as_tensor({facts.text(array, 400)})"),)) \
            if array is not None and _imports_torch(facts) else None
        return ranked([as_tensor, Fix(f"Detach `{facts.text(r.target)}` before converting it to numpy",
                                      (edit(facts, "detach", r.target),), applicability="safe")])
    given = r.node.args[0] if isinstance(r.node, ast.Call) and r.node.args else None
    return ranked([_torch_reduction(facts, r.node), *_detach_given(facts, given)])


def _torch_reduction(facts: Facts, call: ast.Call) -> Fix | None:
    """`np.sum(losses)`, `np.mean([a, b], 0)` of tensors that require grad -> `torch.stack(losses)
    .sum()`: the same reduction, keeping the graph a loss summed this way is meant to have
    (first: detaching it would leave the backward a numpy number)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("sum", "mean") and len(call.args) in (1, 2)
            and all(k.arg == "axis" for k in call.keywords) and len(call.args) + len(call.keywords) <= 2
            and _imports_torch(facts)):
        return None
    axis = [facts.text(a, 100) for a in [*call.args[1:], *(k.value for k in call.keywords)]]
    text = f"torch.stack({facts.text(call.args[0], 400)}).{func.attr}({', '.join(axis)})"
    return Fix(f"Reduce the tensors with torch (`torch.stack(...).{func.attr}()`), keeping their graph",
               (edit(facts, "replace", call, text),))


def _imports_torch(facts: Facts) -> bool:
    """`import torch` at the top of the module: the name a fix may write."""
    return any(isinstance(n, ast.Import) and any(a.name == "torch" and a.asname is None for a in n.names)
               for n in facts.tree.body)


def _detach_given(facts: Facts, given) -> tuple[Fix, ...]:
    """Each tensor given to numpy detached: the elements of a list written out, or of one kept."""
    if isinstance(given, (ast.ListComp, ast.GeneratorExp)):
        elements = [given.elt]
    elif isinstance(given, (ast.List, ast.Tuple)):
        elements = [e for e in given.elts if not isinstance(e, (ast.Constant, ast.Starred))]
    elif isinstance(given, (ast.Name, ast.Attribute, ast.Subscript)):  # `np.array(self.costs)`: a list of tensors kept
        return (Fix(f"Detach the tensors of `{facts.text(given)}` before converting them to numpy",
                    (edit(facts, "detach_each", given),), applicability="safe"),)
    else:
        return ()
    return (Fix("Detach the tensors before converting them to numpy",
                tuple(edit(facts, "detach", e) for e in elements), applicability="safe"),)


def new_leaf(facts: Facts, r) -> tuple[Fix, ...]:
    """The assignment that computed the tensor given to the optimizer makes it a leaf of its
    own (`w = (torch.randn(n, requires_grad=True) * 0.01).detach().requires_grad_()`), so
    the name the model reads and the optimizer holds is one leaf.  Only where the optimizer
    is given that very name: elsewhere the model would read another tensor than the one
    optimized."""
    if r.target is not None and _chains_elements(r.target):
        return _chain_iterables(facts, r.target)
    if r.target is None or r.member:  # (a list holding it: where it was made, if anywhere)
        return _convert_before_wrapping(facts) or _origin_leaf(facts, r)
    name = facts.text(r.target, 200)
    if r.origin:
        stmts = [statement_of(facts, r.origin[0])]
    else:  # made a non-leaf by a conversion (`.to(torch.float64)`), no graph region: its last assignment
        scope = r.function if r.function is not None and not facts.foreign(r.function) else None
        assigned = [n for n in facts.nodes(scope, ast.Assign) if before(n, r.node) and len(n.targets) == 1
                    and facts.text(n.targets[0], 200) == name]
        stmts = [max(assigned, key=position)] if assigned else _set_on_self(facts, r.target)
    return ranked([Fix(f"Make `{facts.text(r.target)}` a leaf where it is computed" + (
        f" (on {facts.line(stmt)})" if len(stmts) > 1 else ""), (edit(facts, "new_leaf", stmt.value),))
        for stmt in stmts if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        and facts.text(stmt.targets[0], 200) in (name, f"self.{getattr(r.target, 'attr', '')}")]) \
        or _origin_leaf(facts, r)


def _origin_leaf(facts: Facts, r) -> tuple[Fix, ...]:
    """The expression that computed the tensor made a leaf there (`cls(torch.randn(n,
    requires_grad=True) * s)`, a product no name is bound to): every reader, the optimizer and
    the model, then holds that one leaf.  Kept only if the analysis confirms it."""
    origin = r.origin[0] if r.origin else None
    if not isinstance(origin, ast.expr) or isinstance(origin, (ast.Name, ast.Attribute)):
        return ()
    return (Fix(f"Make `{facts.text(origin)}` a leaf where it is computed", (edit(facts, "new_leaf", origin),)),)


_CONVERSIONS = frozenset({"to", "cuda", "cpu", "type", *K.DTYPE_METHODS})  # a copy with a grad_fn, maybe


def _convert_before_wrapping(facts: Facts) -> tuple[Fix, ...]:
    """`w = nn.Parameter(t).to(torch.float64)` (the converted copy is no leaf) ->
    `w = nn.Parameter(t.to(torch.float64))`: at the assignments that make one (at most three
    candidates, when the optimizer was given the tensor in a way that names none; each kept
    only if the analysis confirms it)."""
    found = []
    for a in facts.nodes(None, ast.Assign):
        call = a.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _CONVERSIONS \
                and isinstance(call.func.value, ast.Call) and _last_name(call.func.value.func) == "Parameter" \
                and call.func.value.args:
            wrap = call.func.value
            inner = f"{facts.text(wrap.args[0], 400)}.{call.func.attr}({_arguments(facts, call)})"
            rest = _arguments(facts, wrap, skip=1)
            text = f"{facts.text(wrap.func, 400)}({inner}{', ' + rest if rest else ''})"
            found.append(Fix(f"Convert the tensor before making it a parameter (on {facts.line(a)})",
                             (edit(facts, "replace", call, text),)))  # unsafe: the module now registers it
    return ranked(found) if len(found) <= 3 else ()


def _arguments(facts: Facts, call: ast.Call, skip: int = 0) -> str:
    """The source text of a call's arguments, less its first `skip` positional ones."""
    return ", ".join([facts.text(a, 400) for a in call.args[skip:]] +
                     [f"{k.arg}={facts.text(k.value, 400)}" if k.arg else f"**{facts.text(k.value, 400)}"
                      for k in call.keywords])


def _set_on_self(facts: Facts, target) -> list:
    """`self.u = ...`: the assignments in methods (at most three) that set the attribute
    `crit.u` names (candidates: a fix is kept only if the analysis confirms it)."""
    if not isinstance(target, ast.Attribute):
        return []
    sets = [n for n in facts.nodes(None, ast.Assign) if len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute)
            and n.targets[0].attr == target.attr and isinstance(n.targets[0].value, ast.Name)
            and n.targets[0].value.id == "self"]
    return sets if len(sets) <= 3 else []


def _chains_elements(node) -> bool:
    """`itertools.chain(*model.parameters(), w)`: the parameters unpacked into the call, so
    chain iterates each tensor and yields its rows (views, not leaves)."""
    return isinstance(node, ast.Call) and _last_name(node.func) == "chain" and any(
        isinstance(a, ast.Starred) and isinstance(a.value, ast.Call) and _last_name(a.value.func) == "parameters"
        for a in node.args)


def _chain_iterables(facts: Facts, call: ast.Call) -> tuple[Fix, ...]:
    """`chain(*m.parameters(), w)` -> `chain(m.parameters(), [w])`: chain the collections of
    tensors, each tensor whole."""
    parts = [facts.text(a.value, 400) if isinstance(a, ast.Starred) else f"[{facts.text(a, 400)}]" for a in call.args]
    if call.keywords or any(len(p) >= 400 for p in parts):
        return ()
    text = f"{facts.text(call.func, 400)}({', '.join(parts)})"
    return ranked([Fix("Chain the parameter collections, not their tensors' rows", (edit(facts, "replace", call, text),),
                       applicability="safe")])


def detach_flag(facts: Facts, r) -> tuple[Fix, ...]:
    """`y = y.detach()` before the statement that changes the flag: the copy is a leaf.  Setting
    it to True becomes `y.requires_grad_()`, which a non-leaf that requires grad accepts."""
    if not isinstance(r.target, (ast.Name, ast.Attribute)) or r.member:  # (a module holding it: no one name)
        return ()
    stmt = statement_of(facts, r.node)
    name = facts.text(r.target, 200)
    off = _turns_grad_off(stmt)
    # `y.requires_grad = True` asks for what a tensor computed with a graph already has, and
    # `requires_grad_()` gives it to a leaf and leaves a non-leaf alone: right on either path
    on = isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is True
    keep = Fix(f"Use `{name}.requires_grad_()`, which accepts a tensor that already requires grad",
               (edit(facts, "replace", stmt, f"{name}.requires_grad_()"),), applicability="safe") if on else None
    detach = Fix(f"Detach `{name}` before changing its flag", (edit(facts, "detach_before", stmt, name),),
                 applicability="safe" if off else "unsafe")
    made = list(_origin_leaf(facts, r))
    # a loop variable detached is a copy no one else holds: the tensors iterated keep their flags
    # (turned off, their gradients go unused; turned on, they are never filled)
    looped = _loop_target(facts, stmt, name)
    detach = None if on and looped else detach
    if on and _reads_grad(facts) and not _retains_grad(facts, name, stmt):
        # a `.grad` is wanted, which autograd fills for leaves only (or for this tensor if it retains it)
        return ranked([*made, detach, keep])
    return ranked([keep, *made, detach] if looped else [keep, detach, *made])


def _loop_target(facts: Facts, stmt: ast.stmt, name: str) -> bool:
    """`name` is the variable of a `for` loop around `stmt` (`for p in ps: p.requires_grad = b`)."""
    node = stmt
    while node in facts.parents:
        node = facts.parents[node]
        if isinstance(node, (ast.For, ast.AsyncFor)) and facts.text(node.target, 200) == name:
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
    return False


def _retains_grad(facts: Facts, name: str, stmt: ast.stmt) -> bool:
    """`name.retain_grad()` follows `stmt`, on the same tensor (`name` not bound again between):
    the non-leaf's own `.grad` is kept, and its inputs' too."""
    scope = _function_of(facts, stmt)
    calls = [n for n in facts.nodes(scope, ast.Call) if isinstance(n.func, ast.Attribute)
             and n.func.attr == "retain_grad" and facts.text(n.func.value, 200) == name and before(stmt, n)]
    stores = [n for n in facts.nodes(scope, ast.Name, ast.Attribute) if isinstance(n.ctx, ast.Store)
              and facts.text(n, 200) == name and before(stmt, n)]
    return any(not any(before(w, c) for w in stores) for c in calls)


def _reads_grad(facts: Facts) -> bool:
    """The program reads some tensor's `.grad` (`x.grad.sign()`, `p -= lr * p.grad`), not
    `torch.autograd.grad`."""
    return any(n.attr == "grad" and isinstance(n.ctx, ast.Load) and facts.parents.get(n) is not None
               and not (isinstance(facts.parents[n], ast.Call) and facts.parents[n].func is n)
               for n in facts.nodes(None, ast.Attribute))


def _turns_grad_off(stmt: ast.stmt) -> bool:
    """`y.requires_grad = False` or `y.requires_grad_(False)`: the statement wants no gradient."""
    if isinstance(stmt, ast.Assign):
        return isinstance(stmt.value, ast.Constant) and stmt.value.value is False
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(call, ast.Call) and any(isinstance(a, ast.Constant) and a.value is False
                                              for a in [*call.args, *(k.value for k in call.keywords)])


def leave_inference_mode(facts: Facts, r) -> tuple[Fix, ...]:
    """The tensor is cloned (outside inference mode, a clone is an ordinary tensor) where it
    is saved, or before it is changed in place; or, where it was made, `torch.inference_mode()`
    becomes `torch.no_grad()`, whose results are ordinary tensors.  The clone comes first: it
    changes only the tensor that raises, where the mode's other results may meet other code."""
    out = []
    if isinstance(r.target, (ast.Name, ast.Attribute)) and not r.in_place:
        out.append(Fix(f"Clone `{facts.text(r.target)}` where it is used", (edit(facts, "clone", r.target),),
                       applicability="safe"))
    elif isinstance(r.target, (ast.Name, ast.Attribute)):
        name = facts.text(r.target, 200)
        out.append(Fix(f"Clone `{name}` before changing it", (edit(facts, "clone_before", statement_of(facts, r.node),
                                                                 name),), applicability="safe"))
    for site in r.origin:
        if isinstance(site, (ast.With, ast.AsyncWith)):
            found = [item.context_expr for item in site.items]
        else:
            found = list(getattr(site, "decorator_list", ()))
        for expr in found:
            new = _no_grad_instead(facts, expr)
            if new is not None:
                out.append(Fix(f"Use `{new}` instead of `{facts.text(expr)}`", (edit(facts, "replace", expr, new),),
                               applicability="safe"))
    return ranked(out)


def _no_grad_instead(facts: Facts, expr) -> str | None:
    """`torch.no_grad()` for `torch.inference_mode()` (the same module prefix), else None."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "inference_mode" \
            and not expr.keywords and all(isinstance(a, ast.Constant) and a.value is True for a in expr.args):
        return f"{facts.text(expr.func.value, 200)}.no_grad()"
    return None


def allow_unused(facts: Facts, r) -> tuple[Fix, ...]:
    """`materialize_grads=True`: the gradient of an unused input is zeros (torch 2.1 and
    later; it implies `allow_unused=True`), where `None` would break the code that uses it.
    A view made in the call (`grad(e, x[a:b])`) is no input the outputs could use: the
    gradient of `x`, sliced, is what was meant.  A `.detach()` on the outputs' way (`r.origin`:
    where their graph was cut) may be what left the input out: removing it is offered first,
    kept only if the analysis then finds the input used."""
    zeros = Fix("Pass `materialize_grads=True` (zeros for inputs the outputs do not use)",
                (edit(facts, "materialize_grads", r.node),))
    reconnect = [_remove_detach(facts, c) for c in sorted(filter(_is_detach, r.origin), key=position)]
    if isinstance(r.target, ast.Subscript):  # a view made in the call: the tensor viewed is the one used
        base = facts.text(r.target.value)
        return ranked([Fix(f"Differentiate with respect to `{base}` and slice its gradient",
                           (edit(facts, "grad_of_base", r.node),), applicability="safe"), *reconnect, zeros])
    return ranked([*reconnect, zeros])


def reduce_output(facts: Facts, r) -> tuple[Fix, ...]:
    """`loss.backward()` -> `loss.mean().backward()` for a loss left unreduced, `y.sum().backward()`
    otherwise (each offered too); `autograd.grad(y, x)` gets `grad_outputs=torch.ones_like(y)`,
    the gradient of the sum."""
    if r.target is None:
        return ()
    name = facts.text(r.target)
    is_grad = isinstance(r.node, ast.Call) and isinstance(r.node.func, ast.Attribute) and r.node.func.attr == "grad"
    if is_grad:
        return ranked([Fix(f"Pass `grad_outputs=torch.ones_like({name})`",
                           (edit(facts, "grad_outputs", r.node, facts.text(r.target, 200)),))])
    # reduced where it is assigned when it is read after the backward too (`loss.item()` needs
    # one element as much as the backward does), else at the backward
    stmt = statement_of(facts, r.node)
    where = _assigned_value(facts, r.target, stmt) if isinstance(r.target, ast.Name) and \
        _read_after(facts, r.target, stmt) else None
    average = Fix(f"Average `{name}` " + ("where it is computed" if where else "before its backward"),
                  (edit(facts, "mean", where or r.target),))
    total = Fix(f"Sum `{name}` " + ("where it is computed" if where else "before its backward"),
                (edit(facts, "sum", where or r.target),))
    # a loss left unreduced is averaged, as losses are by default; anything else is summed, which
    # is `gradient=torch.ones_like(y)`: each element's own derivative
    return ranked([average, total] if r.from_loss else [total, average])


def _assigned_value(facts: Facts, target: ast.Name, stmt: ast.stmt) -> ast.expr | None:
    """The value of the last assignment `name = value` before `stmt` in its block, when the
    statements between them do not assign the name otherwise."""
    block = _enclosing_block(facts, stmt)
    if block is None:
        return None
    for prev in reversed(block[:block.index(stmt)]):
        if isinstance(prev, ast.Assign) and len(prev.targets) == 1 and isinstance(prev.targets[0], ast.Name) \
                and prev.targets[0].id == target.id:
            return prev.value
        if any(isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Store) for n in ast.walk(prev)):
            return None
    return None
