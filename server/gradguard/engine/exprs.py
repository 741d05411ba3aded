"""Expression evaluation and assignment for the flow engine (generic Python semantics).

Everything torch-specific is delegated to `torch_sem.TorchSemantics`; this mixin knows
Python: names, attributes, containers, comprehensions, calls of local functions and
classes, properties, and the constant folding that lets `if __name__ == "__main__":`,
`if finetune:` or `if self.mem is None:` take only the branch that runs.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import replace

from gradguard import knowledge as K
from gradguard.engine.arrays import array_binop, array_index
from gradguard.engine.shapes import FLOATING, INDEXING, SIZES
from gradguard.engine.limits import TooComplex, few_unrolled
from gradguard.engine.state import YIELDED, State, join_states, surely_bound
from gradguard.engine.managers import managed_call
from gradguard.engine.values import (
    EMPTY, HELD, HELD_NOTHING, NONE, NONE_ATOM, PATCHED, UNKNOWN, UNSEEN_ATTRS, Array, Const, Func, GradMode, Method,
    NamedTupleType, Num, Obj, Partial, Ref, Span, Super, Tensor, Token, Tup, Unknown, const, int_of, join, is_item_attr,
    MAX_TEXT, STR_METHODS, is_summary, item_attr, item_key, join_all, key_value, literal_of, objs_of, tensor_of,
)
from gradguard.ids import gid

_NUM = Num()
DICT_CLASSES = frozenset({"builtins.dict", "collections.OrderedDict"})
# what `__getattr__ = dict.__getitem__` (or `.get`) makes `obj.name` read: the item under "name"
ITEM_GETTERS = frozenset({"builtins.dict.__getitem__", "builtins.dict.get"})
DTYPES = FLOATING | INDEXING | {"uint8", "bool", "complex64", "complex128"}  # what `x.dtype` may be, by name
MAX_YIELDS = 16  # values a generator's path yields that are kept one by one (`yield a; yield b`)
# `Variable` makes plain tensors since torch 0.4 (isinstance holds through its metaclass; no object's type is it)
VARIABLE_CLASSES = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})
TENSOR_CLASSES = frozenset({"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter"}) | VARIABLE_CLASSES
IS_LIST = "<is list>"  # on a sequence object: it is a list (a display), not a tuple it may stand for
LIBRARY_BASES = {"torch.nn.Module": "module", "torch.optim.Optimizer": "optimizer"}  # class -> Obj kind of its instances
BUILTIN_GLOBALS = frozenset({Ref("builtins.globals")})  # the builtin `globals` itself
BUILTIN_CLASSES = {"builtins." + t.__name__: t for t in (int, float, bool, str, list, tuple, dict)}


def _is_instance(a, types: tuple):
    """`isinstance(a, types)` for one atom and builtin classes, None when not known: a literal
    answers for itself (an `id()` token does not); a number of unknown kind (or a string not
    folded) is no container; a tensor is none of
    them, a tuple is a tuple, a dict a dict; a sequence object may be a list, a tuple
    (`x.shape`) or a range; an instance may derive from a builtin."""
    if isinstance(a, Const):
        return isinstance(a.value, types) if not isinstance(a.value, Token) else None
    if isinstance(a, Num):  # a number, or a string `binop` could not fold
        return False if not set(types) & {int, float, bool, str} else None
    if isinstance(a, Tensor):
        return False
    if isinstance(a, Tup):
        return tuple in types
    if isinstance(a, Obj) and a.kind == "dict":
        return dict in types
    if isinstance(a, Obj) and a.kind == "list":
        return None if set(types) & {list, tuple} else False
    return None
BIN_DUNDER = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
              ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul", ast.BitAnd: "and", ast.BitOr: "or",
              ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift"}


class Expressions:
    def num(self):
        return _NUM

    # ----------------------------------------------------------------- dispatch
    def eval(self, node, st: State):
        self.cx.clock.tick()  # an expression can be as long as a file: the deadline is checked in it
        handler = getattr(self, "expr_" + type(node).__name__, None)
        try:
            if handler is None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.expr):
                        self.eval(child, st)
                return UNKNOWN
            return handler(node, st)
        except RecursionError:  # caught first by the innermost expression: the line is where it is
            raise TooComplex("expression nested too deeply to analyse", self.line_now()) from None

    def expr_Constant(self, node, st):
        v = node.value
        if isinstance(v, (bool, str, type(None))) or v is Ellipsis or (isinstance(v, int) and abs(v) < 1 << 31) \
                or isinstance(v, float):  # `entropy_coef: float = 0.0`, tested with `> 0`
            return const(v)
        if isinstance(v, (int, float, complex)):
            return frozenset({_NUM})
        return UNKNOWN

    def expr_Name(self, node, st):
        return self.seen(node, self.lookup(node.id, st))

    def seen(self, node, v):
        """Remember a name's tensor value for hover and fixes, the last one with a graph if any
        had one (a forward run in training and again under `no_grad`: a fix must see the graph
        it carries in training), or that it holds a tuple, as an LSTM state, and whether it is
        None in some evaluation (a fix must not call `.detach()` on it)."""
        t = tensor_of(v)
        if t is not None:
            old = self.cx.facts.values.get(gid(node))
            if old is None or t.regions or not old.regions:
                self.cx.facts.values[gid(node)] = t
        elif any(isinstance(a, Tup) for a in v):
            self.cx.facts.tuples.add(gid(node))
        if any(isinstance(a, Const) and a.value is None for a in v):  # in this evaluation or another
            self.cx.facts.maybe_none.add(gid(node))
        return v

    def expr_NamedExpr(self, node, st):
        v = self.eval(node.value, st)
        self.assign(node.target, v, st, node)
        return v

    def expr_Attribute(self, node, st):
        base = self.eval(node.value, st)
        return self.seen(node, self.attribute(base, node.attr, st, node))

    def expr_Subscript(self, node, st):
        if (slot := self.registry_slot(node, st)) is not None:  # `m._parameters[name]`: what `m.name` reads
            return self.attribute(frozenset({slot[0]}), slot[1], st, node)
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "globals" \
                and not call.args and not call.keywords and self.lookup("globals", st) == BUILTIN_GLOBALS:
            return self.global_named(self.eval(node.slice, st), st)  # `globals()[cfg["model"]]`
        base = self.eval(node.value, st)
        index = self.eval(node.slice, st)
        return self.subscript(base, index, st, node)

    def global_named(self, index, st):
        """`globals()[name]` for a name known (or one of several known): that global of this
        frame's module as it is now; not known for any other name, or one not bound there."""
        names = [a.value for a in index if isinstance(a, Const) and isinstance(a.value, str)]
        if not names or len(names) != len(index):
            return UNKNOWN
        found = [self.global_value(n, st) for n in names]
        return UNKNOWN if any(v is None for v in found) else join_all(found)

    def expr_Slice(self, node, st):
        parts = (node.lower, node.upper, node.step)
        bounds = [None if p is None else int_of(self.eval(p, st)) for p in parts]
        if any(p is not None and b is None for p, b in zip(parts, bounds)) or bounds[2] == 0:
            return UNKNOWN
        return const(Span(*bounds))

    def display_items(self, elts, st) -> tuple:
        """(the values of a list or tuple display one by one, or None when a `*xs` in it is not
        known item by item; what any of its elements may be)."""
        exact, elems = [], []
        for e in elts:
            if isinstance(e, ast.Starred):  # `[*model.parameters(), A, b]`: its items in place
                v = self.eval(e.value, st)
                items = self.exact_items(v, st) if exact is not None else None
                elems.append(self.iter_elements(v, st))
                exact = exact + list(items) if items is not None and exact is not None else None
            elif exact is not None and len(exact) == len(elems):  # no `*xs` so far: the items are the values
                elems[:], v = self.held(e, elems, e, st)
                elems.append(v)
                exact = list(elems)
            else:
                elems.append(self.eval(e, st))
                exact = exact + [elems[-1]] if exact is not None else None
        return (tuple(exact) if exact is not None else None), join_all(elems)

    def expr_Tuple(self, node, st):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            exact, elems = self.display_items(node.elts, st)
            return frozenset({Tup(exact)}) if exact is not None else \
                self.make_sequence(elems, st, node, nonempty=None)
        return frozenset({Tup(tuple(self.eval(e, st) for e in node.elts))})

    def expr_List(self, node, st):
        exact, elems = self.display_items(node.elts, st)
        if exact:
            self.nonleaf_member(frozenset({Tup(exact)}), st, node)  # which element put a non-leaf in it
        out = self.make_sequence(elems, st, node, nonempty=bool(exact) or any(
            not isinstance(e, ast.Starred) for e in node.elts) or None, items=exact)
        return self.surely_lists(out, st) if isinstance(node, ast.List) else out

    @staticmethod
    def surely_lists(v, st):
        """`v`, whose sequence objects are lists (a display, `list(xs)`, `sorted(xs)`): a sequence
        object may otherwise stand for a tuple (`isinstance(v, list)` is then not known)."""
        for a in objs_of(v, "list"):
            st.set_attr(a.id, IS_LIST, const(True))
        return v

    expr_Set = expr_List

    def expr_Starred(self, node, st):
        return self.iter_elements(self.eval(node.value, st), st)

    def expr_Dict(self, node, st):
        keys = [self.eval(k, st) if k is not None else EMPTY for k in node.keys]
        vals = [self.eval(v, st) for v in node.values]
        return self.new_dict(node, keys, vals, st)

    def new_dict(self, node, keys, vals, st, ctx=None):
        """A new dict of these keys and values, in order, a later one replacing an earlier one;
        an EMPTY key is a `**other` entry: other's items (`{**base, "lr": 0.1}`, `dict(base)`,
        `base.copy()`).  Its items and keys are known where the keys are.  `ctx`: the context
        it is made in, if not the running frame's (a callee's `**kwargs`)."""
        obj = Obj(self.container_id("dict", node, ctx), "dict")
        attrs = st.heap[obj.id] = {"<elems>": EMPTY, "<keys>": EMPTY}  # new: written in place
        keyset: frozenset | None = frozenset()

        def maybe(v):  # an entry whose key is not known may replace any item
            for name in [n for n in attrs if is_item_attr(n)]:
                attrs[name] = join(attrs[name], v)

        for k, v in zip(keys, vals):
            src = next(iter(v)) if not k and len(v) == 1 else None
            if k:  # `key: value`
                key = item_key(k)
                items = {item_attr(key): v} if key is not None else {}
                names, elems, known = k, v, frozenset({key}) if key is not None else None
            elif isinstance(src, Obj) and src.kind == "dict":  # `**other`
                known = self.keyset(src, st)
                names, elems = st.get_attr(src.id, "<keys>") or UNKNOWN, st.get_attr(src.id, "<elems>") or UNKNOWN
                own = {n: st.get_attr(src.id, n) for n in st.heap.get(src.id) or () if is_item_attr(n)}
                items = own if known is None else {item_attr(x): own.get(item_attr(x)) or elems for x in known}
            else:
                items, names, elems, known = {}, UNKNOWN, UNKNOWN, None
            attrs["<elems>"], attrs["<keys>"] = join(attrs["<elems>"], elems), join(attrs["<keys>"], names)
            if known is None:  # it may replace any item, and the keys are no longer known
                maybe(elems)
                keyset = None
            for name, item in items.items():
                attrs[name] = item if known is not None or name not in attrs else join(attrs[name], item)
            keyset = keyset | known if keyset is not None and known is not None else None
        if keyset is not None:
            attrs["<keyset>"] = const(keyset)
        return frozenset({obj})

    def expr_JoinedStr(self, node, st):
        """An f-string of literals is a literal (`f"freqs:{n}"`, a cache key): known when each
        part is a str, an int or a bool, formatted plainly."""
        parts = [self.eval(v, st) for v in node.values]
        texts = [literal_of(p, str, int, bool) for p in parts]
        return const("".join(map(str, texts))) if None not in texts else UNKNOWN

    def expr_FormattedValue(self, node, st):
        v = self.eval(node.value, st)
        plain = node.conversion in (-1, ord("s")) and node.format_spec is None
        return v if plain and literal_of(v, str, int, bool) is not None else UNKNOWN

    def expr_BoolOp(self, node, st):
        """`a or b` is `a` where `a` is true, else `b` (`base or Default(model)` with `base` None
        is the default alone); `and` the other way round.  An operand whose truth is not known
        may be the result, and the next one runs too."""
        value, truth = self.bool_chain(node.values, isinstance(node.op, ast.Or), st)
        self.cx.chain_truth = (node, truth)  # for `test_truth`: `flag and isinstance(x, np.ndarray)` is false
        return value or UNKNOWN

    def bool_chain(self, operands, stop: bool, st) -> tuple:
        """The value of `operands[0] or ...` (`stop` True) or `... and ...`, and its truth: the
        next operand runs on a copy of the state where this one's truth is not known, joined
        back after, so what it does (a backward in `done or loss.backward()`) is no must fact.
        An operand whose truth is not known is the value only when its truth is not `stop`: if
        the rest surely ends `stop`, so does the whole (`x and False` is false whatever x)."""
        v = self.eval(operands[0], st)
        if len(operands) == 1:
            return v, self.truth_of(v, st)
        truths = {a: self.truth_of(frozenset({a}), st) for a in v}
        here = frozenset(a for a, t in truths.items() if t is not (not stop))
        if all(t is stop for t in truths.values()):
            return here, stop
        if all(t is (not stop) for t in truths.values()):
            return self.bool_chain(operands[1:], stop, st)
        rest = st.copy()
        later, truth = self.bool_chain(operands[1:], stop, rest)
        joined = join_states(st, rest)
        st.env, st.heap, st.grad = joined.env, joined.heap, joined.grad
        return join(here, later), stop if truth is stop else None

    def expr_UnaryOp(self, node, st):
        v = self.eval(node.operand, st)
        if isinstance(node.op, ast.Not):
            t = self.truth_of(v)
            return const(not t) if t is not None else UNKNOWN
        if tensor_of(v) is not None:
            name = {ast.USub: "neg", ast.Invert: "bitwise_not", ast.UAdd: "positive"}[type(node.op)]
            return self.apply_op(name, node, [v], {}, st)
        if isinstance(node.op, ast.USub) and int_of(v) is not None:
            return const(-int_of(v))  # `x.view(-1)`, `dim=-1`
        return frozenset({_NUM}) if any(isinstance(a, (Num, Const)) for a in v) else UNKNOWN

    def expr_BinOp(self, node, st):
        left = self.eval(node.left, st)
        (left,), right = self.held(node, [left], node.right, st)
        return self.binop(node, node.op, left, right, st, node.left, node.right)

    def held(self, node, values: list, later, st) -> tuple[list, frozenset]:
        """(`values`, the value of `later`): operands evaluated first kept in the heap while a
        call in `later` runs, so that what the call frees or modifies in place marks them as it
        marks the program's names (`dec(q).sum() + aux(q).sum()`, `aux` adding to `q` in place
        what `dec`'s graph saved; `loss_fn(f(x), g(x))`)."""
        calls = self.cx.has_call.get(later)
        if calls is None:
            calls = self.cx.has_call[later] = any(isinstance(n, ast.Call) for n in ast.walk(later))
        keys = [("<operand>", len(self.cx.frames), gid(node), i) for i, v in enumerate(values)
                if tensor_of(v) is not None] if calls else []
        if not keys:
            return values, self.eval(later, st)
        for key in keys:
            st.heap[key] = {"value": values[key[-1]]}
        out = self.eval(later, st)
        values = list(values)
        for key in keys:
            kept = st.heap.pop(key, None)
            if kept is not None:
                values[key[-1]] = kept["value"]
        return values, out

    def binop(self, node, op, left, right, st, left_node=None, right_node=None):
        name = BIN_DUNDER.get(type(op), "add")
        for operands, dunder in (([left, right], f"__{name}__"), ([right, left], f"__r{name}__")):
            methods = self.own_dunder(operands[0], dunder, st)
            if methods is not None:  # `w_sparse * z`: the program's class says what its operator does
                return join_all([self.call_value(self.bind_class_member(m, obj, st, node), [operands[1]], {}, st,
                                                 node) for obj, m in methods])
        if tensor_of(left) is not None and right and all(isinstance(a, Array) and a.ndarray for a in right) \
                and not isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)):
            # `p - w` of an ndarray: torch declines, numpy's reflected op converts the tensor
            self.to_numpy(node, left_node, left, {}, st)
        if tensor_of(left) is not None:
            return self.apply_op(f"__{name}__", node, [left, right], {}, st, arg_nodes=[left_node, right_node])
        if tensor_of(right) is not None:  # `2 - x` is x.__rsub__(2)
            return self.apply_op(f"__r{name}__", node, [right, left], {}, st, arg_nodes=[right_node, left_node])
        seqs = objs_of(left, "list") + objs_of(right, "list")
        if seqs and isinstance(op, ast.Add):  # `list(a.parameters()) + list(b.parameters())`
            li, ri = self.exact_items(left, st), self.exact_items(right, st)
            out = self.make_sequence(join(self.iter_elements(left, st), self.iter_elements(right, st)), st, node,
                                     nonempty=self.is_nonempty(left, st) or self.is_nonempty(right, st) or None,
                                     items=tuple(li) + tuple(ri) if li is not None and ri is not None else None)
            self.contains(out, self.contained(left, st) | self.contained(right, st), st,
                          self.nonleaf_member(left, st, left_node) or self.nonleaf_member(right, st, right_node))
            return out
        if seqs and isinstance(op, ast.Mult):  # `[category] * batch`
            seq, n = (left, int_of(right)) if objs_of(left, "list") else (right, int_of(left))
            items = self.exact_items(seq, st)
            reps = () if n is not None and n <= 0 else \
                tuple(items) * n if items is not None and n is not None and len(items) * n <= 64 else None
            return self.make_sequence(self.iter_elements(seq, st) if reps != () else EMPTY, st, node,
                                      nonempty=bool(reps) or (n is not None and n > 0 and self.is_nonempty(seq, st))
                                      or None,
                                      items=reps)
        if any(isinstance(a, Tup) for a in left) and isinstance(op, ast.Add):
            li, ri = self.exact_items(left, st), self.exact_items(right, st)
            return frozenset({Tup(tuple(li) + tuple(ri))}) if li is not None and ri is not None else UNKNOWN
        if any(isinstance(a, Array) for a in left | right):
            return array_binop(op, left, right)
        folded = _fold(op, left, right)
        if folded is not None:
            return folded
        if isinstance(op, ast.Mod) and literal_of(left, str) is not None:
            return UNKNOWN  # a string formatted with what is not known: a text, not a number
        if any(isinstance(a, (Num, Const)) for a in left) and any(isinstance(a, (Num, Const)) for a in right):
            return frozenset({_NUM})
        return UNKNOWN

    def expr_Compare(self, node, st):
        left = self.eval(node.left, st)
        vals = [self.eval(c, st) for c in node.comparators]
        elementwise = not all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops)
        if elementwise and (tensor_of(left) is not None or any(tensor_of(v) is not None for v in vals)):
            out = self.fresh_tensor(node, st, rg=False, inputs=[left, *vals])
            return self.with_broadcast(out, [left, *vals])  # elementwise: shaped like `+`
        t = self.static_truth(node, st)
        if t is None and len(node.ops) == 1:
            t = _fold_compare(node.ops[0], left, vals[0])
        if t is None and len(node.ops) == 1:
            t = _unit_compare(node.ops[0], left, vals[0])
        if t is None and len(node.ops) == 1:
            t = self.sequence_compare(node.ops[0], left, vals[0], st)
        if t is None and len(node.ops) == 1:
            t = self.type_compare(node, vals[0], st)
        if t is None and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            a, b = self.dtype_named(left), self.dtype_named(vals[0])  # `if cache.dtype != x.dtype:`
            if a in DTYPES and b in DTYPES:
                t = (a == b) == isinstance(node.ops[0], (ast.Eq, ast.Is))
        return const(t) if t is not None else UNKNOWN

    def sequence_compare(self, op, left, right, st):
        """`x.shape != y.shape`, `[1, 2] == [1, 2]`: two sequences surely of one kind (tuples, and
        `torch.Size` is one; lists) whose items are each one known constant are equal exactly when
        their items are."""
        if not isinstance(op, (ast.Eq, ast.NotEq)) or len(left) != 1 or len(right) != 1:
            return None
        (a,), (b,) = tuple(left), tuple(right)
        kinds = {self.sequence_kind(a, st), self.sequence_kind(b, st)}
        if len(kinds) != 1 or None in kinds:
            return None
        va, vb = self.constant_items(a, st), self.constant_items(b, st)
        if va is None or vb is None:
            return None
        return (list(va) == list(vb)) == isinstance(op, ast.Eq)

    @staticmethod
    def sequence_kind(a, st) -> str | None:
        """"tuple" for a tuple or a `torch.Size`, "list" for a list display, None when not sure."""
        if isinstance(a, Tup):
            return "tuple"
        if isinstance(a, Obj) and a.kind == "list":
            return "tuple" if st.get_attr(a.id, SIZES) == const(True) else \
                "list" if st.get_attr(a.id, IS_LIST) == const(True) else None
        return None

    def type_compare(self, node, cls, st):
        """`type(x) is np.ndarray` (or `==`, `is not`, `!=`): false when `x` is surely no instance
        of the class (a tensor is no array); None when not known (a subclass may be one)."""
        call, op = node.left, node.ops[0]
        if not (isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) and isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name) and call.func.id == "type" and len(call.args) == 1
                and not call.keywords and isinstance(call.args[0], (ast.Name, ast.Attribute))):
            return None
        if self.lookup("type", st) != frozenset({Ref("builtins.type")}):
            return None
        if cls and all(isinstance(c, Ref) and c.dotted in VARIABLE_CLASSES for c in cls):
            return isinstance(op, (ast.IsNot, ast.NotEq))  # the pre-0.4 `repackage_hidden` test: never true
        if self.isinstance_truth(self.eval(call.args[0], st), cls, st) is not False:
            return None
        return isinstance(op, (ast.IsNot, ast.NotEq))

    def expr_IfExp(self, node, st):
        t = self.test_truth(node.test, st)
        if t is True:
            return self.eval(node.body, st)
        if t is False:
            return self.eval(node.orelse, st)
        return join(self.eval(node.body, st), self.eval(node.orelse, st))

    def expr_Lambda(self, node, st):
        return frozenset({Func(node, closure=self.closure(node, st))})

    def expr_Await(self, node, st):
        return self.eval(node.value, st)

    def expr_Yield(self, node, st):
        v = self.eval(node.value, st) if node.value is not None else NONE
        self.frame.yields = join(self.frame.yields, v)
        # bound on the paths that yielded: what they yielded, in order, while it is known (see `call_function`)
        so_far = st.env.get(YIELDED, frozenset({Tup(())}))
        st.env[YIELDED] = frozenset(Tup(t.items + (v,)) if isinstance(t, Tup) and len(t.items) < MAX_YIELDS
                                    else NONE_ATOM for t in so_far)
        if self.frame.on_yield is not None:  # a `@contextmanager`'s: the `with` body runs here
            self.frame.on_yield(v, st)
            return NONE
        return UNKNOWN

    def expr_YieldFrom(self, node, st):
        self.frame.yields = join(self.frame.yields, self.iter_elements(self.eval(node.value, st), st))
        if YIELDED in st.env:  # yielded before, maybe more now: no longer known item by item
            st.env[YIELDED] = NONE
        return UNKNOWN

    def comprehension(self, node, st, elt_nodes, first=None):
        """The elements' values, one evaluation standing for all (`first`: the first generator's
        iterable, if already evaluated), and whether every `if` surely holds for every element
        (`if p.requires_grad` over weights that all require grad)."""
        inner = st.copy()
        keeps_all = True
        for gen in node.generators:
            it = first if first is not None and gen is node.generators[0] else self.eval(gen.iter, inner)
            self.assign(gen.target, self.batch_read(self.iter_elements(it, inner)), inner, node, local=True)
            for cond in gen.ifs:
                keeps_all &= self.truth_of(self.eval(cond, inner), inner) is True
        vals = [self.eval(e, inner) for e in elt_nodes]
        self.leave_comprehension(node, st, inner)
        return vals, keeps_all

    def leave_comprehension(self, node, st, inner):
        """What a comprehension's elements did (`[opt.step() for opt in opts]` marking the
        graphs that saved the weights stale) stays; its own variables do not."""
        st.heap = inner.heap
        own = {n.id for gen in node.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        for name, v in st.env.items():
            if name not in own and inner.env.get(name, v) is not v:
                st.env[name] = inner.env[name]

    def expr_ListComp(self, node, st):
        it = self.eval(node.generators[0].iter, st)
        exact = self.exact_comprehension(node, it, st, [node.elt])
        if exact is not None:
            items = tuple(v for v, in exact)
            return self.known_sequence(items, st, node)
        looped = self.comprehension_loop(node, it, st)
        if looped is not None:
            return looped
        (v,), keeps_all = self.comprehension(node, st, [node.elt], first=it)
        # one element per element of a sequence that surely has one: not empty either
        once = len(node.generators) == 1 and not node.generators[0].ifs and self.is_nonempty(it, st)
        out = self.make_sequence(v, st, node, nonempty=once)
        gen = node.generators[0]
        if len(node.generators) == 1 and keeps_all and isinstance(gen.target, ast.Name) \
                and isinstance(node.elt, ast.Name) and node.elt.id == gen.target.id:
            # `[p for p in m.parameters() if p.requires_grad]`: the same elements, those it surely holds too
            self.contains(out, self.contained(it, st), st)
        return out

    def exact_comprehension(self, node, it, st, elt_nodes):
        """The elements of `[Block(d) for _ in range(3)]` one by one (each a new evaluation: three
        blocks, not one standing for all), when its one generator runs over few known elements
        (16, or 64 outside loops run one by one; `it`: the generator's iterable) and its filters are
        decided for each: for each element kept, the values of `elt_nodes`; None otherwise."""
        gen = node.generators[0]
        if len(node.generators) != 1 or gen.is_async:
            return None
        items = self.exact_items(it, st)
        count, counter = self.loop_count(it, st) if items is None else (len(items), None)
        if count is None or (items is None and counter is None) or not few_unrolled(count, len(elt_nodes),
                                                                                     self.cx.unrolled_work):
            return None
        inner = st.copy()
        vals = []
        self.cx.unrolling += 1
        try:
            elems = [items[i] if items is not None else counter(i, self.iter_elements(it, inner)) for i in range(count)]
            if gen.ifs:  # `{k: v for k, v in cfg.items() if k != "type"}`: each filter decided first, for each
                kept = [self.kept(gen, elem, inner.copy(), node) for elem in elems]
                if None in kept:
                    return None
                elems = [elem for elem, keep in zip(elems, kept) if keep]
            for elem in elems:
                self.assign(gen.target, elem, inner, node, local=True)
                vals.append(tuple(self.eval(e, inner) for e in elt_nodes))
        finally:
            self.cx.unrolling -= 1
        self.leave_comprehension(node, st, inner)
        return tuple(vals)

    def kept(self, gen, elem, st, node) -> bool | None:
        """Whether a comprehension's filters keep `elem` (None: not known)."""
        self.assign(gen.target, elem, st, node, local=True)
        truths = [self.truth_of(self.eval(c, st), st) for c in gen.ifs]
        return None if None in truths else all(truths)

    expr_SetComp = expr_ListComp
    expr_GeneratorExp = expr_ListComp

    def expr_DictComp(self, node, st):
        it = self.eval(node.generators[0].iter, st)
        exact = self.exact_comprehension(node, it, st, [node.key, node.value])
        if exact is not None:  # `{i: peer(x) for i, peer in enumerate(self.peers)}`: each item known
            return self.new_dict(node, [k for k, _ in exact], [v for _, v in exact], st)
        (k, v), _ = self.comprehension(node, st, [node.key, node.value], first=it)
        obj = Obj(self.container_id("dict", node), "dict")
        st.heap[obj.id] = {"<elems>": v, "<keys>": k}
        return frozenset({obj})

    # ----------------------------------------------------------------- assignment
    def assign(self, target, v, st: State, stmt, local=False):
        if isinstance(target, ast.Name):
            self.seen(target, v)
            if local:
                st.env[target.id] = v
            else:
                self.bind(target.id, v, st)
        elif isinstance(target, (ast.Tuple, ast.List)):
            parts = self.unpack(v, len(target.elts), st, stmt)
            for t, p in zip(target.elts, parts):
                if isinstance(t, ast.Starred):
                    self.assign(t.value, self.make_sequence(p, st, t), st, stmt, local)
                else:
                    self.assign(t, p, st, stmt, local)
        elif isinstance(target, ast.Attribute) and self.namedtuple_defaults(target, v, st, stmt, local):
            pass
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value, st)
            self.set_attribute(base, target.attr, v, st, target)
        elif isinstance(target, ast.Subscript):
            if (slot := self.registry_slot(target, st, ("_parameters",))) is not None:  # `m._parameters[name] = w`
                self.set_parameter_slot(*slot, v, st, target)
                return
            if (slot := self.registry_slot(target, st, ("_modules",))) is not None:  # `m._modules[name] = layer`
                self.set_attribute(frozenset({slot[0]}), slot[1], v, st, target)
                return
            base = self.eval(target.value, st)
            index = self.eval(target.slice, st)
            self.set_item(base, index, v, st, target, stmt)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, v, st, stmt, local)

    def set_attribute(self, base, name, v, st, target):
        self.patch_library(base, name, v, st)  # `torch.zeros = wrapped`
        holders = [a for a in base if isinstance(a, Obj)]
        for obj in holders:
            if obj.kind in ("instance", "module") and self.own_setattr(obj, st):
                # its class's `__setattr__` decides where the value goes (a spiking neuron's state kept
                # in a dict of memories that `reset()` restores): what the attribute reads is not known
                st.set_attr(obj.id, name, UNKNOWN, strong=len(holders) == 1)
                continue
            st.set_attr(obj.id, name, v, strong=len(holders) == 1)
            if obj.kind == "module" and name.isdigit() and (info := self.builtin_info(obj)) is not None \
                    and info.container:  # `setattr(seq, "0", wrapped)`: a Sequential's child by its name
                self.set_module_item(obj, int(name), v, st, strong=len(holders) == 1)
            if obj.kind == "module":
                t = tensor_of(v)
                if t is not None and t.leaf is not False and any(o[0] == "param" for o in t.objs):
                    # an nn.Parameter assigned to a module becomes one of the module's parameters (a
                    # copy made by `.to(...)` is a plain tensor: no leaf, and no parameter);
                    # one frozen among trainable ones (`conv.weight = nn.Parameter(w, requires_grad=False)`)
                    # leaves the module's one flag not known
                    st.set_attr(obj.id, name, frozenset({Tensor(rg=t.rg, leaf=True, deps=frozenset(),
                                                                objs=t.objs | {("params", obj.id)},
                                                                shape=t.shape, dtype=t.dtype,
                                                                ident=("param", obj.id, name))}))
                    if t.rg is None or t.rg != self.module_rg(obj, st):
                        st.set_attr(obj.id, "<rg>", UNKNOWN)
        t = tensor_of(base)
        if t is not None:
            self.set_tensor_attribute(base, name, v, st, target)

    def own_dunder(self, value, name: str, st) -> list | None:
        """[(instance, the method)] when every alternative of `value` is an instance of a class of
        the program that defines the operator method `name`, else None."""
        out = []
        for a in value:
            found = self.own_member(a, name, st) if isinstance(a, Obj) and a.kind == "instance" else None
            if not found or not all(isinstance(f, Func) for f in found):
                return None
            out.append((a, found))
        return out or None

    def own_setattr(self, obj: Obj, st) -> bool:
        """Whether the program's class of `obj` (or one of its bases) defines `__setattr__`."""
        found = self.own_member(obj, "__setattr__", st)
        return bool(found) and any(isinstance(a, Func) for a in found)

    def own_member(self, obj: Obj, name: str, st):
        """What the program's class of the object `obj` (or one of its bases) holds as `name`,
        or None (no such member, or a class that is not the program's)."""
        cls = self.cx.obj_class.get(obj.id)
        return self.class_lookup(cls, name, st) if cls is not None else None

    def set_item(self, base, index, v, st, target, stmt):
        if tensor_of(base) is not None:
            self.inplace(target, target.value, base, [v], st, "copy_")
            return
        for obj in base:
            if isinstance(obj, Obj) and obj.kind == "list" and self.replace_item(obj, index, v, st, len(base) == 1):
                continue
            if isinstance(obj, Obj) and obj.kind in ("list", "dict"):
                st.set_attr(obj.id, "<elems>", v, strong=False)
                self.forget_items(obj, st)
                if obj.kind == "dict":
                    self.set_dict_item(obj, item_key(index), v, st)
            elif isinstance(obj, Obj) and obj.kind == "module" and (info := self.builtin_info(obj)) is not None \
                    and info.container:
                self.set_module_item(obj, item_key(index), v, st, strong=len(base) == 1)

    def replace_item(self, obj: Obj, index, v, st, one: bool) -> bool:
        """`state[i] = s` on the one list `obj` is, its items known and `i` a known position in it:
        item `i` is now `v` and the others stay what they were (`state = [None] * n_layers`, then
        each layer's state set in its place, read back by the next step).  False when not so."""
        items = self.exact_items(frozenset({obj}), st) if one and not is_summary(obj.id) else None
        at = int_of(index)
        if items is None or at is None or not -len(items) <= at < len(items):
            return False
        new = list(items)
        new[at] = v
        self.forget_items(obj, st)  # (which tensors it surely holds is worked out again when asked)
        st.set_attr(obj.id, "<items>", frozenset({Tup(tuple(new))}))
        st.set_attr(obj.id, "<elems>", join_all(new))
        return True

    def forget_items(self, obj: Obj, st) -> None:
        """A container whose items changed one by one (`xs[i] = v`, `del xs[i]`, `xs.pop()`):
        they are no longer known one by one, nor which tensors it surely holds."""
        st.set_attr(obj.id, "<items>", UNKNOWN)
        st.set_attr(obj.id, HELD, HELD_NOTHING)
        st.set_attr(obj.id, self.CONTAINS, UNKNOWN)
        st.set_attr(obj.id, self.NONLEAF, EMPTY)

    def set_dict_item(self, obj: Obj, key, v, st):
        """`d[key] = v`.  Under a key not known, any item may be the one replaced: each known
        item may now be `v` too, and the keys are no longer known."""
        keys = self.keyset(obj, st)
        if key is None:
            for name in [n for n in st.heap.get(obj.id) or () if is_item_attr(n)]:
                st.set_attr(obj.id, name, v, strong=False)
            keys = None
        else:
            st.set_attr(obj.id, item_attr(key), v)
            keys = None if keys is None else keys | {key}
        st.set_attr(obj.id, "<keyset>", const(keys) if keys is not None else UNKNOWN)
        self.vars_written(obj, key, v, st)

    def default_item(self, d: Obj, key, st, node):
        """`registry[trigger]` of a `defaultdict(list)` whose keys are known and lack `trigger`:
        the factory's new value, now stored under that key; None for any other dict."""
        factory, keys = st.get_attr(d.id, "<default>"), self.keyset(d, st)
        if factory is None or keys is None or key in keys:
            return None
        v = self.call_value(factory, [], {}, st, node)
        st.set_attr(d.id, "<elems>", v, strong=False)
        st.set_attr(d.id, "<keys>", key_value(key), strong=False)
        self.set_dict_item(d, key, v, st)
        return v

    def augassign(self, s, st):
        current = self.eval(s.target, st)
        rhs = self.eval(s.value, st)
        if tensor_of(current) is not None:  # `t += x` on a tensor is in place (`t.add_(x)`)
            if isinstance(s.target, ast.Subscript) and (base := self.peek(s.target.value, st)) \
                    and len(objs_of(base, "list")) == len(base):  # `laterals[i] += y`: a fix may assign the item
                self.cx.facts.list_items.add(gid(s))
            self.augassign_tensor(s, current, rhs, st)
            return
        lists = objs_of(current, "list")
        if isinstance(s.op, ast.Add) and lists and len(lists) == len(current):  # `out += [h]` extends `out`
            for obj in lists:
                self.container_method(obj, "extend", [rhs], {}, st, s, strong=len(current) == 1)
            return
        self.assign(s.target, self.binop(s, s.op, current, rhs, st, s.target, s.value), st, s)

    # ----------------------------------------------------------------- unpacking and iteration
    def unpack(self, v, n, st, node):
        outs = [EMPTY] * n
        for a in v:
            if a == NONE_ATOM and len(v) > 1:
                continue  # unpacking None raises: the path goes on with the other alternatives
            if isinstance(a, Tup) and len(a.items) == n:
                parts = list(a.items)
            elif isinstance(a, Tensor):  # its rows (`q, k, v = qkv`): views without the first dimension
                row = self.view_of(frozenset({a}), node, st)
                parts = [self.with_shape(row, a.shape[1:]) if a.shape else row] * n
            elif isinstance(a, Obj) and (a.kind in ("list", "generator", "dict") or
                                         a.kind == "module" and st.get_attr(a.id, "<layers>")):
                # (a container module's layers: `for attn, ff in self.layers:` over ModuleLists of two)
                exact = self.exact_items(frozenset({a}), st)
                parts = list(exact) if exact is not None and len(exact) == n else \
                    [self.iter_elements(frozenset({a}), st)] * n
            else:
                parts = [UNKNOWN] * n
            outs = [join(o, p) for o, p in zip(outs, parts)]
        return [o if o else UNKNOWN for o in outs]

    def exact_items(self, v, st):
        """The exact elements of a short literal sequence (the keys of a dict), or None if not known."""
        if len(v) != 1:
            return None
        (a,) = tuple(v)
        if isinstance(a, Tup):
            return a.items
        if isinstance(a, Obj) and a.kind == "dict" and st is not None:  # iterating a dict: its keys
            known = self.dict_in_order(a, st)
            return tuple(key_value(k) for k, _ in known) if known is not None else None
        if isinstance(a, Obj) and st is not None:
            items = st.get_attr(a.id, "<items>")
            if items is not None and len(items) == 1:
                (t,) = tuple(items)
                if isinstance(t, Tup):
                    return t.items
        return None

    def iter_elements(self, v, st):
        out = EMPTY
        for a in v:
            if isinstance(a, Tup):
                out = join(out, join_all(a.items) if a.items else EMPTY)
            elif isinstance(a, Obj) and a.kind in ("list", "generator", "dict") and st is not None:
                key = "<keys>" if a.kind == "dict" else "<elems>"
                out = join(out, st.get_attr(a.id, key) or UNKNOWN)
            elif isinstance(a, Obj) and a.kind == "module" and st is not None:
                layers = st.get_attr(a.id, "<layers>")
                out = join(out, layers if layers else UNKNOWN)
            elif isinstance(a, Obj) and a.kind == "instance" and st is not None:
                out = join(out, self.iterate_instance(a, st))
            elif isinstance(a, Tensor):  # a row: a view, of the shape after the first dimension
                out = join(out, self.with_shape(self.view_of(frozenset({a}), None, st),
                                                a.shape[1:] if a.shape else None))
            elif isinstance(a, Const) and isinstance(a.value, str):
                out = join(out, UNKNOWN)
            else:
                out = join(out, UNKNOWN)
        return out if out else UNKNOWN

    def is_nonempty(self, v, st) -> bool:
        """Whether iterating `v` surely gives an element.  A tensor is taken to have a first
        dimension (`for x_t in sequence:` runs), as a training loop is taken to run."""
        if not v:
            return False
        for a in v:
            if isinstance(a, Tensor):
                continue
            if isinstance(a, Tup):
                if not a.items:
                    return False
            elif isinstance(a, Obj) and a.kind in ("list", "generator") and st is not None:
                if st.get_attr(a.id, "<nonempty>") != const(True):
                    return False
            else:
                return False
        return True

    def known_sequence(self, items, st, node):
        """A new list of these items, known one by one."""
        items = tuple(items)
        return self.make_sequence(join_all(items), st, node, nonempty=bool(items), items=items)

    def make_sequence(self, elem, st, node, nonempty=None, items=None):
        obj = Obj(self.container_id("list", node), "list")
        attrs = {"<elems>": elem if elem else EMPTY, HELD: HELD_NOTHING}
        if nonempty:
            attrs["<nonempty>"] = const(True)
        if items is not None:
            attrs["<items>"] = frozenset({Tup(tuple(items))})
            attrs[HELD] = self.all_of([HELD_NOTHING, *items])
        st.heap[obj.id] = attrs
        return frozenset({obj})

    # ----------------------------------------------------------------- attributes and items
    def attribute(self, base, name, st, node):
        out = EMPTY
        patched = st.heap.get(PATCHED)
        for a in base:
            if isinstance(a, Ref) and patched and (a.dotted + "." + name) in patched:
                out = join(out, patched[a.dotted + "." + name])  # a library function the program replaced
            elif isinstance(a, Ref):
                value = K.PYTHON_CONSTANTS.get(a.dotted + "." + name)  # `math.pi`: a number
                out = join(out, const(value) if value is not None else frozenset({Ref(a.dotted + "." + name)}))
            elif isinstance(a, Tensor):
                out = join(out, self.tensor_attribute(frozenset({a}), name, st, node))
            elif isinstance(a, Array):
                out = join(out, self.array_attribute(a, name, st, node))
            elif isinstance(a, Obj):
                out = join(out, self.object_attribute(a, name, st, node))
            elif isinstance(a, Super) or isinstance(a, GradMode) and name in ("__enter__", "__exit__"):
                out = join(out, frozenset({Method(frozenset({a}), name)}))  # looked up when called
            elif isinstance(a, Tup) and name in a.names:  # a named tuple's field
                out = join(out, a.items[a.names.index(name)])
            elif isinstance(a, Const) and isinstance(a.value, str) and name in STR_METHODS:
                out = join(out, frozenset({Method(frozenset({a}), name)}))  # folded when called
            else:
                out = join(out, UNKNOWN)
        return out if out else UNKNOWN

    def object_attribute(self, obj: Obj, name, st, node):
        if obj.kind == "class" and name == "__name__" and obj.id in self.cx.class_nodes:  # a registry's key
            return const(self.cx.class_nodes[obj.id].name)
        v = st.get_attr(obj.id, name)
        if v is not None and obj.kind != "class":
            return v
        cls = self.cx.obj_class.get(obj.id) if obj.kind != "class" else obj.id
        if cls is not None:
            found = self.class_lookup(cls, name, st)
            if found is not None:
                return self.bind_class_member(found, obj, st, node)
            if obj.kind == "dict" and not hasattr(dict, name):  # `cfg.lr` on a dict whose class reads items
                getter = self.class_lookup(cls, "__getattr__", st) or EMPTY
                if getter and all(isinstance(g, Ref) and g.dotted in ITEM_GETTERS for g in getter):
                    return st.get_attr(obj.id, item_attr(name)) or UNKNOWN
                return UNKNOWN
        if obj.kind == "module":
            return self.module_attribute(obj, name, st, node)
        if obj.kind == "namespace":  # a workspace module: what it does not define stays opaque
            if v is not None and self.cx.lazy:
                return self.imported(name, v, st, obj.id)
            return v if v is not None else frozenset(
                Ref(f"{a.value}.{name}") for a in st.get_attr(obj.id, "__name__") or () if isinstance(a, Const))
        if obj.kind == "class" and v is not None:
            return v
        if st.get_attr(obj.id, UNSEEN_ATTRS) is not None:  # a call not followed may have set it
            return UNKNOWN
        return frozenset({Method(frozenset({obj}), name)})

    def class_lookup(self, cls_id, name, st, seen=None):
        seen = seen or set()
        if cls_id in seen:
            return None
        seen.add(cls_id)
        v = st.get_attr(cls_id, name)
        if v is not None:
            return v
        for base in self.bases_of(cls_id, st):
            if isinstance(base, Obj) and base.kind == "class":
                found = self.class_lookup(base.id, name, st, seen)
                if found is not None:
                    return found
        return None

    def bind_class_member(self, v, obj, st, node):
        out = EMPTY
        for a in v:
            if isinstance(a, Func) and (not isinstance(a.node, ast.Lambda) or a.kind != "cached_property"):
                # (a lambda in a class body is a method too: `scale = lambda self, x: x * 2`)
                if a.kind == "property" and obj.kind != "class":
                    out = join(out, self.call_function(a, [frozenset({obj})], {}, st, node))
                elif a.kind == "cached_property" and obj.kind != "class":
                    # computed on the first read and kept in the instance, which later reads find first
                    value = self.call_function(a, [frozenset({obj})], {}, st, node)
                    st.set_attr(obj.id, a.node.name, value)
                    out = join(out, value)
                elif a.kind == "classmethod":  # bound to the class, read off the class or an instance
                    cls = obj if obj.kind == "class" else Obj(self.cx.obj_class[obj.id], "class") \
                        if obj.id in self.cx.obj_class else None
                    out = join(out, frozenset({replace(a, owner=None, bound=frozenset({cls}))}) if cls else UNKNOWN)
                elif a.kind == "staticmethod" or obj.kind == "class":
                    out = join(out, frozenset({a}))
                else:
                    out = join(out, frozenset({replace(a, owner=None, bound=frozenset({obj}))}))
            else:
                out = join(out, frozenset({a}))
        return out

    def list_slice(self, lst: Obj, k: ast.Slice, st, node):
        """`memory[-n:]`: a new list of exactly those items when the list's items and the
        bounds are known (a memory bank cut to its last n entries), else the list itself."""
        items = self.exact_items(frozenset({lst}), st)
        written = (k.lower, k.upper, k.step)
        bounds = [None if e is None else int_of(self.eval(e, st)) for e in written]
        unknown = any(e is not None and b is None for e, b in zip(written, bounds))
        if items is None or unknown or bounds[2] == 0:
            return frozenset({lst})
        sliced = items[slice(*bounds)]
        return self.known_sequence(sliced, st, node)

    def subscript(self, base, index, st, node):
        out = EMPTY
        number = all(isinstance(i, Num) or isinstance(i, Const) and type(i.value) is int for i in index)
        for a in base:
            if number and index and self.surely_empty(a, st):
                continue  # `np.array([])[i]`, `()[i]`: an IndexError, so this is not what it is if it goes on
            if isinstance(a, Tensor):
                out = join(out, self.index_tensor(frozenset({a}), index, st, node))
            elif isinstance(a, Array):
                out = join(out, array_index(a, index))
            elif isinstance(a, Tup):
                k, at = node.slice, int_of(index)
                if at is not None and -len(a.items) <= at < len(a.items):
                    out = join(out, a.items[at])
                elif isinstance(k, ast.Slice):
                    out = join(out, frozenset({a}))
                else:
                    out = join(out, join_all(a.items) if a.items else UNKNOWN)
            elif isinstance(a, Obj) and a.kind in ("list", "dict", "module", "generator"):
                k = node.slice
                key = item_key(index)
                if a.kind in ("dict", "module") and key is not None:  # a ModuleDict's layer by its key
                    exact = st.get_attr(a.id, item_attr(key)) or self.default_item(a, key, st, node)
                    if exact is not None:
                        out = join(out, exact)
                        continue
                if isinstance(k, ast.Slice) and a.kind == "list":
                    out = join(out, self.list_slice(a, k, st, node))
                    continue
                items = self.exact_items(frozenset({a}), st)
                at = int_of(index)
                if items is not None and at is not None and -len(items) <= at < len(items):
                    out = join(out, items[at])
                else:
                    out = join(out, st.get_attr(a.id, "<elems>") or self.iter_elements(frozenset({a}), st))
            elif isinstance(a, Obj) and a.kind == "instance":
                getitem = self.own_member(a, "__getitem__", st)
                if getitem:
                    out = join(out, self.call_value(self.bind_class_member(getitem, a, st, node), [index], {},
                                                    st, node))
                else:
                    out = join(out, UNKNOWN)
            else:
                out = join(out, UNKNOWN)
        return out if out else UNKNOWN

    def surely_empty(self, a, st) -> bool:
        """Whether a sequence atom has no items: an array whose first size is 0, an empty tuple,
        a list known item by item to have none (a number indexes none of them)."""
        if isinstance(a, Array):
            return bool(a.shape) and a.shape[0] == 0
        if isinstance(a, Tup):
            return not a.items
        return isinstance(a, Obj) and a.kind == "list" and self.exact_items(frozenset({a}), st) == ()

    # ----------------------------------------------------------------- calls
    def expr_Call(self, node, st):
        func = self.eval(node.func, st)
        args = []
        spread = False
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.eval(a.value, st)
                items = self.exact_items(v, st)
                args.extend(items if items is not None else [self.iter_elements(v, st)])
                spread |= items is None
            else:
                args[:], v = self.held(a, args, a, st)
                args.append(v)
        kwargs, unknown_keywords = {}, False
        for k in node.keywords:
            v = self.eval(k.value, st)
            if k.arg is not None:
                kwargs[k.arg] = v
            else:  # `f(**spec["params"])`: the items of a dict known whole are keywords
                items = self.keyword_items(v, st)
                unknown_keywords |= items is None
                kwargs.update(items or {})
        # `f(*xs)` with `xs` not known item by item: the arguments stand for any number of values
        self.cx.unknown_spread = node if spread else None
        # `f(**cfg)` with keys not known: any parameter may have been given one
        self.cx.unknown_keywords = node if unknown_keywords else None
        if func == UNKNOWN and isinstance(node.func, ast.Attribute):
            self.detached_unknown(node.func.attr, st)
        if self.cx.frames[-1].raised_at is not None:  # a call its receiver or arguments made surely raised:
            return UNKNOWN  # this one is never made (`Trainer(cfg).fit(x)` when `__init__` raises)
        return self.call_value(func, args, kwargs, st, node)

    def keyword_items(self, v, st) -> dict | None:
        """The items of the one dict `v` surely is, by their string keys, when all are known."""
        (d,) = tuple(v) if len(v) == 1 else (None,)
        keys = self.keyset(d, st) if isinstance(d, Obj) and d.kind == "dict" else None
        if keys is None or not all(isinstance(k, str) for k in keys):
            return None
        items = {k: st.get_attr(d.id, item_attr(k)) for k in keys}
        return None if None in items.values() else items

    def call_value(self, func, args, kwargs, st, node):
        if len(func) == 1:  # the common case, without a closure
            return self.call_atom(next(iter(func)), args, kwargs, st, node) or UNKNOWN
        return self.alternatives(func, st, lambda a, st: self.call_atom(a, args, kwargs, st, node))

    def call_atom(self, a, args, kwargs, st, node):
        """A call of one alternative `a` of the called value."""
        if isinstance(a, Func):
            if a.node in self.cx.managed_funcs:  # run when a `with` enters it
                return managed_call(a, args, kwargs)
            call_args = ([a.bound] if a.bound is not None else []) + list(args)
            return self.call_function(a, call_args, dict(kwargs), st, node)
        if isinstance(a, Obj) and a.kind == "class":
            return self.instantiate(a, args, kwargs, st, node)
        if isinstance(a, Obj):
            return self.call_object(a, args, kwargs, st, node)
        if isinstance(a, Ref):
            return self.call_ref(a.dotted, args, kwargs, st, node)
        if isinstance(a, Method):
            return self.call_method(a.recv, a.name, args, kwargs, st, node)
        if isinstance(a, NamedTupleType):
            return self.named_tuple(a, args, kwargs, node)
        if isinstance(a, Partial):
            return self.call_value(a.func, [*a.args, *args], {**dict(a.kwargs), **kwargs}, st, node)
        if isinstance(a, GradMode) and a.mode != "keep" and not a.leaves_inference and len(args) == 1 \
                and not kwargs and args[0] and all(isinstance(f, Func) for f in args[0]):
            # `torch.no_grad()(fn)`, as a decorator does: fn, run in that mode
            return frozenset(replace(f, mode=a.mode, inference=a.inference) for f in args[0])
        return self.call_unknown(args, kwargs, st, node)

    def namedtuple_defaults(self, target, v, st, stmt, local) -> bool:
        """`State.__new__.__defaults__ = (...)` (namedtuple's defaults before `defaults=`):
        `State` is rebound to the class with these defaults.  Whether the target was one."""
        owner = target.value
        if target.attr != "__defaults__" or not isinstance(owner, ast.Attribute) or owner.attr != "__new__" \
                or not isinstance(owner.value, ast.Name):
            return False
        cls = self.lookup(owner.value.id, st)
        if len(cls) != 1 or not isinstance(next(iter(cls)), NamedTupleType):
            return False
        (a,) = tuple(cls)
        self.assign(owner.value, frozenset({a.with_defaults(self.exact_items(v, st))}), st, stmt, local)
        return True

    def named_tuple(self, cls: NamedTupleType, args, kwargs, node):
        """`State(v, i=x)`: a tuple whose items are named; a field left to its default, or
        bound by a `*`/`**` spread, is not known."""
        if self.cx.unknown_spread is node or self.cx.unknown_keywords is node:
            return frozenset({Tup(tuple(UNKNOWN for _ in cls.fields), cls.fields)})
        first_default = len(cls.fields) - len(cls.defaults)
        items = tuple(args[i] if i < len(args) else kwargs.get(name, cls.defaults[i - first_default]
                                                               if i >= first_default else UNKNOWN)
                      for i, name in enumerate(cls.fields))
        return frozenset({Tup(items, cls.fields)})

    def alternatives(self, value, st, fn):
        """`fn(atom, state)` for each atom of `value`, each on its own copy of the state when
        there are several: they are different runs, and what one does (an in-place layer, a
        backward) must not become a fact of another.  The states are joined back into `st`."""
        if len(value) <= 1:
            out = fn(next(iter(value)), st) if value else UNKNOWN
            return out if out else UNKNOWN
        out, joined = EMPTY, None
        outer, self.cx.one_of_several = self.cx.one_of_several, True  # no alternative alone is what runs
        try:
            for a in value:
                alt = st.copy()
                out = join(out, fn(a, alt))
                joined = join_states(joined, alt)
        finally:
            self.cx.one_of_several = outer
        st.env, st.heap, st.grad = joined.env, joined.heap, joined.grad
        return out if out else UNKNOWN

    def call_object(self, obj, args, kwargs, st, node):
        if obj.kind == "module":  # `model(x)`: its hooks around its forward
            return self.hooked_call(obj, args, kwargs, st, node,
                                    lambda xs: self.call_forward(obj, xs, kwargs, st, node))
        return self.call_forward(obj, args, kwargs, st, node)

    def call_forward(self, obj, args, kwargs, st, node):
        """`obj(*args)` without hooks: its class's `__call__` (or a module's `forward`), what a
        torch module computes, or an unknown call."""
        own = st.get_attr(obj.id, "forward") if obj.kind == "module" else None
        if own and all(isinstance(a, (Func, Partial)) for a in own):  # `layer.forward = wrapper`: what runs now
            return self.call_value(own, args, kwargs, st, node)
        cls = self.cx.obj_class.get(obj.id)
        if cls is not None:
            target = None
            if obj.kind == "module":
                target = self.class_lookup(cls, "__call__", st) or self.class_lookup(cls, "forward", st)
            else:
                target = self.class_lookup(cls, "__call__", st)
            if target is not None:
                return self.call_value(self.bind_class_member(target, obj, st, node), args, kwargs, st, node)
        if obj.kind == "module":
            return self.module_call(obj, args, kwargs, st, node)
        return self.call_unknown(args, kwargs, st, node)

    def instantiate(self, cls, args, kwargs, st, node, run_init=True, ctx=None):
        if self.derives_from(cls.id, st, DICT_CLASSES.__contains__) and self.class_lookup(cls.id, "__init__", st) is None:
            # `class Config(dict): __getattr__ = dict.__getitem__`: a dict of its class
            made = self.call_builtin("dict", args, kwargs, st, node)
            for d in objs_of(made, "dict"):
                self.cx.obj_class[d.id] = cls.id
            return made
        is_module = self.is_module_class(cls.id, st)
        ident = ("obj", ctx, id(node)) if ctx is not None else ("obj",) + self.region_id(node, "obj")
        obj = Obj(ident, "module" if is_module else "instance")
        self.cx.sure_events += 1
        self.cx.obj_class[obj.id] = cls.id
        if is_module:
            self.cx.module_kind[obj.id] = self.library_base(cls.id, st) or "local"
        st.heap.setdefault(obj.id, self.new_module() if is_module else {})
        generated = self.generated_init(cls.id, st)
        init = self.class_lookup(cls.id, "__init__", st) if generated is None else None
        fields = self.fields_of(generated, st) if generated is not None else None
        if fields is not None and run_init:
            self.init_dataclass(obj, fields, args, kwargs, st, node)
            init = self.class_lookup(cls.id, "__post_init__", st)
        if init is not None and run_init:
            self.call_value(self.bind_class_member(init, obj, st, node),
                            args if fields is None else [], dict(kwargs) if fields is None else {}, st, node)
        return frozenset({obj})

    def generated_init(self, cls_id, st, seen=None):
        """The dataclass whose generated `__init__` a class runs: itself, or the first base
        that is one, unless a class on the way writes its own `__init__`; None otherwise."""
        node = self.cx.class_nodes.get(cls_id)
        seen = (seen or set()) | {cls_id}
        if node is None or any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in node.body):
            return None
        if cls_id in self.cx.dataclass_fields:
            return cls_id
        for base in objs_of(self.bases_of(cls_id, st), "class"):
            if base.id not in seen and base.id in self.cx.class_nodes:
                return self.generated_init(base.id, st, seen)  # the first base a method is looked up in
        return None

    def fields_of(self, cls_id, st, seen=None) -> tuple:
        """The `__init__` fields of a dataclass: those of every dataclass among its bases (a
        plain class between them too) first, in definition order."""
        seen = (seen or set()) | {cls_id}
        inherited: dict = {}
        for base in reversed(objs_of(self.bases_of(cls_id, st), "class")):
            if base.id not in seen:
                inherited |= {f[0]: f for f in self.fields_of(base.id, st, seen)}
        return tuple((inherited | {f[0]: f for f in self.cx.dataclass_fields.get(cls_id, ())}).values())

    def init_dataclass(self, obj, fields, args, kwargs, st, node):
        """The generated `__init__`: each field from its argument, else its default (a factory
        called now); any field from a `**cfg` or `*args` not known item by item."""
        spread, keywords = self.cx.unknown_spread is node, self.cx.unknown_keywords is node
        for i, (name, how, default) in enumerate(fields):
            if spread:  # `Config(*values)`: which argument binds which field is not known
                v = UNKNOWN
            elif i < len(args):
                v = args[i]
            elif name in kwargs:
                v = kwargs[name]
            elif keywords or how is None:
                v = UNKNOWN
            elif how == "factory":
                v = self.call_value(default, [], {}, st, node)
            else:
                v = default
            st.set_attr(obj.id, name, v)

    def is_module_class(self, cls_id, st) -> bool:
        return self.derives_from(cls_id, st, lambda dotted: dotted.startswith("torch.nn")
                                 or dotted.split(".")[-1] in ("Module", "LightningModule"))

    def derives_from(self, cls_id, st, library, seen=None) -> bool:
        """Whether a class of the project has, among its bases or theirs, a library class whose
        dotted name passes `library` (`torch.nn.Module`, `torch.autograd.Function`)."""
        seen = seen or set()
        if cls_id in seen:
            return False
        seen.add(cls_id)
        for base in self.bases_of(cls_id, st):
            if isinstance(base, Ref) and library(base.dotted):
                return True
            if isinstance(base, Obj) and base.kind == "class" and self.derives_from(base.id, st, library, seen):
                return True
        return False

    def class_of_node(self, classdef):
        cid = ("class", gid(classdef))
        return Obj(cid, "class") if cid in self.cx.class_nodes else None

    def iterate_instance(self, obj, st):
        """Elements of `for x in obj`: what `__iter__` yields, or `__next__` returns when
        `__iter__` returns an iterator object (often `self`)."""
        it = self.own_member(obj, "__iter__", st)
        if it is None:
            return UNKNOWN
        gen = self.call_value(self.bind_class_member(it, obj, st, None), [], {}, st, self._iter_node(obj))
        out = EMPTY
        for a in gen:
            if isinstance(a, Obj) and a.kind == "instance":
                nxt = self.own_member(a, "__next__", st)
                out = join(out, self.call_value(self.bind_class_member(nxt, a, st, None), [], {}, st,
                                                self._iter_node(a)) if nxt is not None else UNKNOWN)
            else:
                out = join(out, self.iter_elements(frozenset({a}), st))
        return out if out else UNKNOWN

    def _iter_node(self, obj):
        return self.cx.class_nodes.get(self.cx.obj_class.get(obj.id))

    # ----------------------------------------------------------------- constant folding
    def truth_of(self, v, st=None):
        if not v or any(isinstance(a, (Unknown, Tensor, Array, Num, Method, Ref)) for a in v):
            return None
        truths = set()
        for a in v:
            if isinstance(a, Const):
                truths.add(bool(a.value))
            elif isinstance(a, Tup):
                truths.add(bool(a.items))
            elif isinstance(a, Obj) and a.kind == "dict" and st is not None and self.keyset(a, st) is not None:
                truths.add(bool(self.keyset(a, st)))
            elif isinstance(a, Obj) and a.kind == "list" \
                    and (items := self.exact_items(frozenset({a}), st)) is not None:
                truths.add(bool(items))
            elif isinstance(a, Obj) and a.kind in ("list", "dict"):
                return None
            else:
                truths.add(True)
        return truths.pop() if len(truths) == 1 else None

    def keyset(self, d: Obj, st):
        """The keys of a dict when they are all known (a literal or `dict(a=..)` not changed since)."""
        keys = st.get_attr(d.id, "<keyset>") or UNKNOWN
        (k,) = tuple(keys) if len(keys) == 1 else (None,)
        return k.value if isinstance(k, Const) else None

    def test_truth(self, test, st):
        """Evaluate a condition; its truth if known: folded from names and attributes, or the
        constant it evaluated to (`i % 3 == 0` in a concrete iteration)."""
        v = self.eval(test, st)
        t = self.static_truth(test, st)
        if t is None and len(v) == 1 and isinstance(next(iter(v)), Const):
            t = bool(next(iter(v)).value)
        if t is None and self.cx.chain_truth[0] is test:
            t = self.cx.chain_truth[1]
        return t

    def static_truth(self, test, st):
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            t = self.static_truth(test.operand, st)
            return None if t is None else not t
        if isinstance(test, ast.BoolOp):
            parts = [self.static_truth(v, st) for v in test.values]
            if isinstance(test.op, ast.And):
                return False if False in parts else (True if all(p is True for p in parts) else None)
            return True if True in parts else (False if all(p is False for p in parts) else None)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            op = test.ops[0]
            left = self.peek(test.left, st)
            right = self.peek(test.comparators[0], st)
            if isinstance(op, (ast.Is, ast.IsNot)) and right == NONE:
                return _fold_none_test(op, left)
            comp = test.comparators[0]
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(comp, ast.Call) and not comp.args \
                    and isinstance(comp.func, ast.Name) and comp.func.id == "locals" and not self.frame.is_module \
                    and isinstance(test.left, ast.Constant) and isinstance(test.left.value, str):
                bound = surely_bound(st, test.left.value)  # `if "h" in locals():`
                return None if bound is None else bound == isinstance(op, ast.In)
            if isinstance(op, (ast.In, ast.NotIn)) and len(right) == 1:
                (b,) = tuple(right)
                keys = self.keyset(b, st) if isinstance(b, Obj) and b.kind == "dict" else None
                if keys == frozenset():  # nothing is in an empty dict, whatever it is
                    return isinstance(op, ast.NotIn)
            if isinstance(op, (ast.In, ast.NotIn)) and len(left) == 1 and len(right) == 1:
                (a,), (b,) = tuple(left), tuple(right)
                keys = self.keyset(b, st) if isinstance(b, Obj) and b.kind == "dict" else None
                key = item_key(left) if isinstance(a, Tup) else a.value if isinstance(a, Const) else None
                if (key is not None or a == NONE_ATOM) and keys is not None:  # (`(h, w) in cache`, `None in d`)
                    return (key in keys) == isinstance(op, ast.In)
                values = self.constant_items(b, st)  # `if name in ["encoder", "decoder"]:`
                if isinstance(a, Const) and values is not None:
                    return (a.value in values) == isinstance(op, ast.In)
            if isinstance(op, (ast.Eq, ast.NotEq)) and len(left) == 1 and len(right) == 1:
                (a,), (b,) = tuple(left), tuple(right)
                if isinstance(a, Const) and isinstance(b, Const):
                    return (a.value == b.value) == isinstance(op, ast.Eq)
            return None
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
                and len(test.args) == 2:
            return self.isinstance_truth(self.peek(test.args[0], st), self.peek(test.args[1], st), st)
        if isinstance(test, (ast.Name, ast.Attribute)):
            return self.truth_of(self.peek(test, st), st)
        return None

    def constant_items(self, b, st) -> list | None:
        """The values of a tuple, a list or a string whose items are each one known constant
        (a membership test of a known value in it is then known); None otherwise."""
        if isinstance(b, Const) and isinstance(b.value, str):
            return b.value
        items = b.items if isinstance(b, Tup) else (
            self.exact_items(frozenset({b}), st) if isinstance(b, Obj) and b.kind == "list" else None)
        if items is None or not all(len(i) == 1 and isinstance(next(iter(i)), Const) for i in items):
            return None
        return [next(iter(i)).value for i in items]

    def peek(self, node, st):
        """Evaluate a side-effect-free expression for folding (names, attributes, constants)."""
        if isinstance(node, ast.Constant):
            return self.expr_Constant(node, st)
        if isinstance(node, ast.Name):
            return self.lookup(node.id, st)
        if isinstance(node, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return frozenset({Tup(tuple(self.peek(e, st) for e in node.elts))})  # `(list, tuple)`, `["a", "b"]`
        if isinstance(node, ast.Attribute):
            base = self.peek(node.value, st)
            out = EMPTY
            for a in base:
                if isinstance(a, Obj) and a.kind in ("instance", "module", "class"):
                    v = st.get_attr(a.id, node.attr)
                    if v is None:
                        cls = self.cx.obj_class.get(a.id) if a.kind != "class" else a.id
                        found = self.class_lookup(cls, node.attr, st) if cls is not None else None
                        if found is None or any(isinstance(f, Func) for f in found):
                            return UNKNOWN
                        v = found
                    out = join(out, v)
                elif isinstance(a, Ref):
                    out = join(out, frozenset({Ref(a.dotted + "." + node.attr)}))
                else:
                    return UNKNOWN
            return out if out else UNKNOWN
        return UNKNOWN

    def isinstance_truth(self, v, classes, st):
        classes = frozenset(c for a in classes for c in (frozenset().union(*a.items) if isinstance(a, Tup) else {a}))
        if classes and all(isinstance(a, Ref) and a.dotted in BUILTIN_CLASSES for a in classes):
            types = tuple(BUILTIN_CLASSES[a.dotted] for a in classes)
            truths = {(list in types) if self.sequence_kind(a, st) == "list" else _is_instance(a, types) for a in v}
            return truths.pop() if len(truths) == 1 else None
        if classes and all(isinstance(a, Ref) and a.dotted == "numpy.ndarray" for a in classes):
            truths = {True if isinstance(a, Array) else False if isinstance(a, (Tensor, Tup, Const, Num, Obj)) else None
                      for a in v}
            return truths.pop() if len(truths) == 1 else None
        if classes and all(isinstance(a, Ref) and a.dotted in TENSOR_CLASSES for a in classes):
            truths = {True if isinstance(a, Tensor) else False if isinstance(a, (Tup, Const, Num, Obj, Array)) else None
                      for a in v}
            return truths.pop() if len(truths) == 1 else None
        if len(classes) == 1 and (kind := LIBRARY_BASES.get(getattr(next(iter(classes)), "dotted", None))):
            # `isinstance(m, nn.Module)` in a helper that walks models: a tensor or a plain value is not one; an
            # object the engine made as a module (an optimizer) surely is, as a container is not
            truths = {True if isinstance(a, Obj) and a.kind == kind else False if isinstance(a, (Tensor, Tup, Const, Num, Array))
                      or isinstance(a, Obj) and a.kind in ("list", "dict", "module", "optimizer") else None for a in v}
            return truths.pop() if len(truths) == 1 else None
        if len(classes) == 1 and (layer := self.nn_class(next(iter(classes)))) is not None:
            return self.layer_instance(v, layer, st)
        targets = {a.id for a in classes if isinstance(a, Obj) and a.kind == "class"}
        if not targets or len(targets) != len(classes):
            return None
        truths = set()
        for a in v:
            if not isinstance(a, Obj) or a.kind not in ("instance", "module"):
                return None
            cls = self.cx.obj_class.get(a.id)
            truths.add(cls is not None and any(self.subclass(cls, t, st) for t in targets))
        return truths.pop() if len(truths) == 1 else None

    @staticmethod
    def nn_class(c) -> str | None:
        """The name of the torch.nn layer class (or base of layers, `_ConvNd`) a class value is."""
        if not (isinstance(c, Ref) and c.dotted.startswith("torch.nn.")):
            return None
        name = c.dotted.rsplit(".", 1)[-1]
        return name if name != "Module" and name in K.NN_CLASSES else None

    def layer_instance(self, v, layer: str, st):
        """`isinstance(m, nn.Linear)` (a LoRA wrapper's test of each child): a module made as a
        torch layer is one when that layer is or derives from it; a project's module when
        every base of its class is known; anything else the engine made is none."""
        truths = set()
        for a in v:
            if isinstance(a, (Tensor, Tup, Const, Num, Array)) or isinstance(a, Obj) and a.kind in ("list", "dict"):
                truths.add(False)
            elif isinstance(a, Obj) and a.id in self.cx.obj_class:
                truths.add(self.derives_from_layer(self.cx.obj_class[a.id], layer, st))
            elif isinstance(a, Obj) and a.kind == "module" and (info := K.module_info(self.cx.module_kind.get(a.id))):
                truths.add(info.derives_from(layer))
            else:
                return None
        return truths.pop() if len(truths) == 1 else None

    def derives_from_layer(self, cls, layer: str, st, seen=frozenset()):
        """Whether a project class derives from the torch.nn class `layer`: None when a base is
        not known (imported from where the engine does not read, or one of several)."""
        bases = st.get_attr(cls, "<bases>")
        if cls in seen or bases is None or len(bases) != 1 or not isinstance(row := next(iter(bases)), Tup) \
                or any(len(item) != 1 for item in row.items):
            return None
        truths = set()
        for (b,) in (tuple(item) for item in row.items):
            if isinstance(b, Obj) and b.kind == "class":
                truths.add(self.derives_from_layer(b.id, layer, st, seen | {cls}))
            elif isinstance(b, Ref) and b.dotted.startswith("torch.nn.") and (info := K.module_info(b.dotted)):
                truths.add(info.derives_from(layer))
            else:
                return None
        return True if True in truths else None if None in truths else False

    def subclass(self, cls, target, st, seen=None) -> bool:
        if cls == target:
            return True
        seen = seen or set()
        if cls in seen:
            return False
        seen.add(cls)
        return any(isinstance(b, Obj) and b.kind == "class" and self.subclass(b.id, target, st, seen)
                   for b in self.bases_of(cls, st))

    def narrow(self, test, st, polarity):
        """Keep only the atoms of `x` that pass `isinstance(x, C)` or `x is None` (or fail it)
        in a branch."""
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)) \
                and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None:
            v = self.lookup(test.left.id, st)
            none = polarity == isinstance(test.ops[0], ast.Is)  # the branch where it is None
            kept = frozenset(a for a in v if (a == NONE_ATOM) == none or isinstance(a, Unknown))
            if kept and kept != v:
                self.bind(test.left.id, kept, st)
            return st
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" \
                and len(test.args) == 2 and isinstance(test.args[0], ast.Name):
            name = test.args[0].id
            v = self.lookup(name, st)
            classes = self.peek(test.args[1], st)
            kept = frozenset(a for a in v if self.isinstance_truth(frozenset({a}), classes, st) in (polarity, None))
            if kept and kept != v:
                self.bind(name, kept, st)
        return st

    def dotted(self, node) -> str:
        if isinstance(node, ast.Call):
            node = node.func
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(node.id)
            return ".".join(reversed(parts))
        return ""



_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Mod: operator.mod, ast.Div: operator.truediv}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


def _fold(op, left, right):
    """`(step - 1) % 3` with known numbers (a concrete iteration's counter) is a known number,
    and so is `min(step / warmup, 1.0) * scale` (floats, true division: a schedule's value)."""
    fn = _ARITH.get(type(op))
    if isinstance(op, ast.Add) and literal_of(left, str) is not None and literal_of(right, str) is not None:
        out = literal_of(left, str) + literal_of(right, str)  # `"Conv" + str(d) + "d"`, a name looked up
        return const(out) if len(out) <= MAX_TEXT else None
    if isinstance(op, ast.Mod) and (text := literal_of(left, str)) is not None:  # `"gcl_%d" % i`: formatting
        (r,) = tuple(right) if len(right) == 1 else (None,)
        values = tuple(literal_of(i, str, int, float) for i in r.items) if isinstance(r, Tup) else \
            literal_of(right, str, int, float)
        if values is None or isinstance(values, tuple) and None in values:
            return None
        try:
            out = text % values
        except (TypeError, ValueError, KeyError, OverflowError):
            return None
        return const(out) if len(out) <= MAX_TEXT else None
    a, b = int_of(left), int_of(right)
    if isinstance(op, ast.Mod) and a == 0 and b is None:
        return const(0)  # `i % n_critic` on the first iteration: 0 whatever the (nonzero) number
    if a is None or b is None or isinstance(op, ast.Div):
        a, b = literal_of(left, int, float), literal_of(right, int, float)
    if fn is None or a is None or b is None:
        return None
    try:
        out = fn(a, b)
    except ArithmeticError:
        return None
    return const(out) if abs(out) < 2 ** 53 else None


def _unit_compare(op, left, right):
    """`np.random.rand(1) < p` with a known `p`: every value of a uniform draw is in [0, 1), so
    it is surely below 1 and surely not below 0 (a probability gate set to 1.0 or 0.0)."""
    flipped = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}
    if not _unit(left) and _unit(right) and type(op) in flipped:
        op, left, right = flipped[type(op)](), right, left  # `p > r` is `r < p`
    p = literal_of(right, int, float)
    if not _unit(left) or p is None:
        return None
    if isinstance(op, (ast.Lt, ast.LtE)):
        return True if p >= 1 else False if p < 0 or p == 0 and isinstance(op, ast.Lt) else None
    if isinstance(op, (ast.Gt, ast.GtE)):
        return False if p >= 1 else True if p < 0 or p == 0 and isinstance(op, ast.GtE) else None
    return None


def _unit(v) -> bool:
    """Whether a value is surely a uniform draw of at most one element (its truth is its value's)."""
    return bool(v) and all(isinstance(a, Array) and a.unit and a.shape in ((), (1,)) for a in v)


def _fold_none_test(op, left):
    """`x is None` / `x is not None` when `x` is surely None or surely something else."""
    if left == NONE:
        res = True
    elif left and not left & NONE and not any(isinstance(a, Unknown) for a in left):  # `0.5 is None`: False
        res = False
    else:
        return None
    return res if isinstance(op, ast.Is) else not res


def _fold_compare(op, left, right):
    """A comparison of known numbers, or a None test of a value computed by a call
    (`bank.get() is not None`: the method's result in this state)."""
    if isinstance(op, (ast.Is, ast.IsNot)) and right == NONE:
        return _fold_none_test(op, left)
    if isinstance(op, (ast.Is, ast.IsNot)) and (want := literal_of(right, bool)) is not None:
        # `self.training is False`: True and False are singletons, so identity is equality of bools
        found = {isinstance(a, Const) and a.value is want for a in left} if left and \
            all(isinstance(a, Const) for a in left) else {None}
        return found.pop() == isinstance(op, ast.Is) if len(found) == 1 and None not in found else None
    fn = _COMPARE.get(type(op))
    words = literal_of(left, str), literal_of(right, str)  # `cfg["loss"]["adversarial"] == "wgan_gp_loss"`
    if isinstance(op, (ast.Eq, ast.NotEq)) and None not in words:
        return fn(*words)
    a, b = literal_of(left, int, float), literal_of(right, int, float)
    return None if fn is None or a is None or b is None else fn(a, b)
