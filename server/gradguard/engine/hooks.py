"""Forward hooks and pre-hooks of modules: what `module(x)` runs besides `forward`.

`register_forward_hook(fn)` makes every later call of the module run `fn(module, args,
output)` after its forward, and use what it returns (if not None) as the output; a
pre-hook runs `fn(module, args)` before, and what it returns (if not None) replaces the
arguments.  Research code uses them to keep a layer's activations (`feats[name] = output`)
for a loss, a Grad-CAM or a distillation term, and a stored output carries the graph of
the step that made it into the next one.

A module holds its hooks in the heap, `<pre_hooks>` and `<fwd_hooks>`, each a tuple of
callables, empty when it is made, so that a join of a path that registered one with a
path that did not gives two tuples: hooks that may run.  Only hooks known one by one run;
a module whose hooks are not known (registered on several paths, through a handle the
engine lost, or with options it does not model) gives an unknown output, and none of the
effects its hooks may have is assumed.
"""
from __future__ import annotations

from gradguard.engine.values import NONE, UNKNOWN, Const, Obj, Tup, join, objs_of
from gradguard.ids import gid

PRE, FORWARD = "<pre_hooks>", "<fwd_hooks>"
REGISTER = {"register_forward_pre_hook": PRE, "register_forward_hook": FORWARD}
UNMODELLED = frozenset({"with_kwargs", "always_call"})  # a hook called another way, or also when forward raises
NO_HOOKS = frozenset({Tup(())})


class ModuleHooks:
    def no_hooks(self, attrs: dict) -> dict:
        """The heap attributes of a new module: no hooks yet."""
        attrs[PRE] = attrs[FORWARD] = NO_HOOKS
        return attrs

    def register_module_hook(self, m: Obj, name, args, kwargs, st, node, strong):
        """`m.register_forward_hook(fn)`: `fn` joins the module's hooks (first with
        `prepend=True`); a handle that can remove it is returned."""
        attr = REGISTER[name]
        known = _tuple_items(st.get_attr(m.id, attr))
        fn = args[0] if args else kwargs.get("hook", UNKNOWN)
        if not strong or known is None or UNMODELLED & kwargs.keys() or len(args) > 1:
            st.set_attr(m.id, attr, UNKNOWN)
            return UNKNOWN
        prepend = self.truth_of(kwargs["prepend"]) if "prepend" in kwargs else False
        if prepend is None:
            st.set_attr(m.id, attr, UNKNOWN)
            return UNKNOWN
        st.set_attr(m.id, attr, frozenset({Tup((fn,) + known if prepend else known + (fn,))}))
        handle = Obj(("hook", self.frame.ctx, gid(node)), "hook")
        st.heap[handle.id] = {"<module>": frozenset({m}), "<attr>": frozenset({Const(attr)}), "<hook>": fn}
        return frozenset({handle})

    def hook_handle_method(self, handle: Obj, name, st):
        """`handle.remove()`: the hook leaves its module's tuple (every hook is unknown if
        the handle stands for several registrations)."""
        if name != "remove":
            return UNKNOWN
        attrs = st.heap.get(handle.id) or {}
        modules, attr, fn = attrs.get("<module>"), attrs.get("<attr>"), attrs.get("<hook>")
        if not modules or not attr or len(modules) != 1 or len(attr) != 1:
            return NONE
        (m,), (a,) = tuple(modules), tuple(attr)
        known = _tuple_items(st.get_attr(m.id, a.value))
        kept = None if known is None else tuple(h for h in known if h != fn)
        if kept is None or len(kept) != len(known) - 1:
            st.set_attr(m.id, a.value, UNKNOWN)
        else:
            st.set_attr(m.id, a.value, frozenset({Tup(kept)}))
        return NONE

    @staticmethod
    def hook_owners(st) -> list:
        """The objects the registered forward hooks and pre-hooks are bound to or close over
        (`tracker.keep` storing `self.features = output`, a closure's `feats` dict): what a
        module call the engine does not follow may change through them."""
        owners = []
        for attrs in list(st.heap.values()):
            for name in (PRE, FORWARD):
                for hooks in attrs.get(name) or ():
                    for fn in hooks.items if isinstance(hooks, Tup) else ():
                        for f in fn:
                            owners += objs_of(getattr(f, "bound", None) or frozenset())
                            owners += [o for _, v in getattr(f, "closure", ()) for o in objs_of(v)]
        return owners

    def hooked_call(self, m: Obj, args, kwargs, st, node, call):
        """`m(*args)`: its pre-hooks, `call(args)` (the forward), then its forward hooks."""
        pre, fwd = st.get_attr(m.id, PRE), st.get_attr(m.id, FORWARD)
        if pre in (None, NO_HOOKS) and fwd in (None, NO_HOOKS):
            return call(args)
        pre = _tuple_items(pre)
        if pre is None or not fwd or not all(isinstance(a, Tup) for a in fwd):
            return join(call(args), UNKNOWN)
        me = frozenset({m})
        for fn in pre:
            got = self.call_value(fn, [me, frozenset({Tup(tuple(args))})], {}, st, node)
            if got & NONE:  # None: the arguments are kept; perhaps None: they are not known
                args = args if got == NONE else [join(a, UNKNOWN) for a in args]
            else:  # a tuple of new arguments, or the one new argument
                items = self.exact_items(got, st)
                args = list(items) if items is not None else [got]
        out = call(args)

        def forward_hooks(hooks: Tup, st):
            """The forward hooks of one alternative (a hook registered on one of several layers
            in a loop is perhaps on this one): each may replace the output."""
            result = out
            box = ("hook_output", self.frame.ctx, gid(node))
            for fn in hooks.items:
                # the output is held in the state while the hook runs: what the hook does to the tensor
                # object itself (`output.requires_grad_(True)`) is what the caller gets back
                st.heap[box] = {"<out>": result}
                got = self.call_value(fn, [me, frozenset({Tup(tuple(args))}), result], {}, st, node)
                result = (st.heap.pop(box, None) or {}).get("<out>", result)
                result = result if got == NONE else join(result, got - NONE) if got & NONE else got
            return result
        return self.alternatives(fwd, st, forward_hooks)


def _tuple_items(v) -> tuple | None:
    """The items of the one tuple `v` surely is (a module's hooks, a pre-hook's new
    arguments), or None."""
    if v is None or len(v) != 1:
        return None
    (t,) = tuple(v)
    return t.items if isinstance(t, Tup) else None
