"""Context managers a project writes itself, and grad modes entered by hand.

Research code wraps evaluation in its own context managers: a class whose `__enter__` puts the
model in eval mode and enters `torch.inference_mode()` by calling the mode's `__enter__`, or a
`@contextlib.contextmanager` generator that yields inside `with torch.no_grad():`.  What the
`with` body computes is made in the mode those set, and what their exit code does (restore
training mode, drop a cache) happens after it:

- `with obj:` of a project class runs `obj.__enter__()` (its result is the `as` value), the
  body, then `obj.__exit__(None, None, None)`;
- `with managed(...):` of a `@contextmanager` function runs the function, and its `yield`
  runs the body in the caller, inside whatever the function entered around the `yield`;
- `mode.__enter__()` / `mode.__exit__(...)` on `torch.no_grad()`, `torch.inference_mode()`,
  ... set the grad mode and restore the one before, as the `with` statement does.

Anything else (several context managers in one `with`, a value that may be one of several)
is left to the `with` statement's own handling.
"""
from __future__ import annotations

from gradguard.engine.values import NONE, Func, GradMode, Managed, Obj, Ref

CONTEXTMANAGER = frozenset({Ref("contextlib.contextmanager")})


class UserContexts:
    """Mixed into the interpreter (it calls functions, runs blocks and reads the frames)."""

    def user_context(self, ctx, st):
        """The one project context manager `ctx` surely is: a `Managed` call or an instance
        whose class has `__enter__` and `__exit__`; None otherwise."""
        if len(ctx) != 1:
            return None
        (a,) = tuple(ctx)
        if isinstance(a, Managed):
            return a
        cls = self.cx.obj_class.get(a.id) if isinstance(a, Obj) and a.kind == "instance" else None
        return a if cls is not None and self.class_lookup(cls, "__enter__", st) is not None \
            and self.class_lookup(cls, "__exit__", st) is not None else None

    def with_user_context(self, s, cm, st):
        """`with cm [as x]: body` for a project context manager (see the module docstring)."""
        item = s.items[0]
        if isinstance(cm, Managed):
            return self.with_managed(s, cm, st)
        cls = self.cx.obj_class[cm.id]
        enter = self.class_lookup(cls, "__enter__", st)
        self.cx.not_followed = None
        v = self.call_value(self.bind_class_member(enter, cm, st, s), [], {}, st, item.context_expr)
        if item.optional_vars is not None:
            self.assign(item.optional_vars, v, st, s)
        if self.cx.not_followed is not None and any(isinstance(f, Func) and f.node is self.cx.not_followed for f in enter):
            return self.body_in_unknown_mode(s, st)
        out = self.exec_block(s.body, st)
        if out is not None:
            leave = self.class_lookup(cls, "__exit__", out)
            self.call_value(self.bind_class_member(leave, cm, out, s), [NONE, NONE, NONE], {}, out,
                            item.context_expr)
        return out

    def with_managed(self, s, cm: Managed, st):
        """The generator runs as a call; at its `yield` the caller's body runs on the caller's
        locals (kept in the heap during the call), and the generator goes on after it.  The
        states the body ends in are joined into the caller's; a body that ends every path
        (`return`, `break`) ends the `with` too."""
        item = s.items[0]
        ended = {"body": False, "ran": False}

        def at_yield(value, callee_st):
            caller = self.cx.frames.pop()
            stash = ("<env>", len(self.cx.frames))
            outer = callee_st.copy()
            outer.env = dict(callee_st.heap[stash])
            try:
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, value, outer, s)
                after = self.exec_block(s.body, outer)
            finally:
                self.cx.frames.append(caller)
            ended["ran"] = True
            if after is None:
                return  # the generator's exit code runs with the state before the body
            ended["body"] = True
            callee_st.heap = after.heap
            callee_st.heap[stash] = after.env

        self.cx.pending_yield = at_yield
        func = cm.func
        self.call_function(func, ([func.bound] if func.bound is not None else []) + list(cm.args), dict(cm.kwargs),
                           st, item.context_expr)
        self.cx.pending_yield = None  # not consumed when the call was not followed
        if not ended["ran"]:  # not followed, or no `yield` reached
            return self.body_in_unknown_mode(s, st)
        return st if ended["body"] else None

    def body_in_unknown_mode(self, s, st):
        """The body of a `with` whose context manager was not followed: it may have set any grad
        mode (a limit only ever removes findings)."""
        saved, st.grad = st.grad, None
        out = self.exec_block(s.body, st)
        if out is not None:
            out.grad = saved
        return out

    def enter_grad_mode(self, ctx, mode, site, st) -> None:
        """Enter the grad mode `mode` (True, False, None: not known, or "keep") that the context
        manager `ctx` sets at `site` (a `with`, or a `mode.__enter__()` call): `inference_mode()`
        is its own mode, which `enable_grad()` inside it does not leave and `inference_mode(False)`
        does; the caller restores the mode and the sites on exit."""
        if mode is False and all(isinstance(a, GradMode) and a.inference for a in ctx):
            self.cx.inference_sites.append(site)
        elif mode is True and all(isinstance(a, GradMode) and a.leaves_inference for a in ctx):
            self.cx.inference_sites.append(None)  # out of inference mode, grad on
        elif mode is not False and mode != "keep" and self.inference_site() is not None:
            mode, site = False, self.cx.inference_sites[-1]  # `enable_grad()` inside it records nothing either
        if mode != "keep":
            st.grad = mode
            if mode is False:
                self.cx.no_grad_sites.append(site)

    def manual_grad_mode(self, mode: GradMode, name, st, node):
        """`mode.__enter__()`: the mode `with mode:` sets (see `stmt_With`); `mode.__exit__(...)`:
        the mode before the last such `__enter__`."""
        if name == "__enter__":
            self.cx.entered_modes.append((st.grad, len(self.cx.no_grad_sites), len(self.cx.inference_sites)))
            ctx = frozenset({mode})
            self.enter_grad_mode(ctx, self.grad_mode_of(ctx), node, st)
            return NONE
        if self.cx.entered_modes:
            st.grad, sites, inference = self.cx.entered_modes.pop()
            del self.cx.no_grad_sites[sites:]
            del self.cx.inference_sites[inference:]
        return NONE


def managed_call(func: Func, args, kwargs) -> frozenset:
    """What calling a `@contextmanager` function gives: the call, run when a `with` enters it."""
    return frozenset({Managed(func, tuple(args), tuple(kwargs.items()))})
