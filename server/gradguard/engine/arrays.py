"""numpy arrays, for the shapes and dtypes they bring into torch.

Research code often makes its data with numpy (`np.random.uniform(-3, 3, size=5)`,
`np.zeros((n, d), dtype=np.float32)`) and converts it (`torch.tensor(points)`,
`torch.from_numpy(x)`).  An array is an `Array` atom: no graph, and its shape and dtype
where numpy's own rules give them (its factories, element-wise functions, arithmetic with
numbers, `astype`, basic indexing).  Anything else about an array is not known, and a
value that is not surely an array goes the usual way.
"""
from __future__ import annotations

import ast

from gradguard import knowledge as K
from gradguard.engine.shapes import broadcast, indexed, numel, reshaped, sizes
from gradguard.engine.values import UNKNOWN, Array, Const, Method, Num, Ref, const, int_of

_FLOATS = frozenset({"float16", "float32", "float64"})
_NAMES = {"float": "float64", "double": "float64", "int": "int64", "single": "float32", "half": "float16",
          "bool": "bool", "bool_": "bool"}


def array_of(v) -> Array | None:
    """The array `v` surely is, or None."""
    (a,) = tuple(v) if len(v) == 1 else (None,)
    return a if isinstance(a, Array) else None


def dtype_name(v) -> str | None:
    """numpy's name of a dtype written `np.float32`, `"float32"`, `float` or `torch.float32`."""
    (a,) = tuple(v) if len(v) == 1 else (None,)
    name = a.value if isinstance(a, Const) and isinstance(a.value, str) else \
    a.dotted.rsplit(".", 1)[-1] if isinstance(a, Ref) else None
    return _NAMES.get(name, name) if name else None


def call_numpy(name: str, args: list, kwargs: dict):
    """`numpy.<name>(...)`: an array when numpy states its shape or dtype, else None."""
    t = K.NUMPY_ARRAYS
    if name in t.generators:  # `rng = np.random.default_rng(0)`: `rng.normal(size=3)` draws as np.random does
        return frozenset({Ref("numpy.random")})
    dtype = dtype_name(kwargs["dtype"]) if "dtype" in kwargs else "int64" if name in t.int_factories else "float64"
    where = t.sizes.get(name)
    if where == "each":
        return frozenset({Array(sizes(args), dtype)})
    if where is not None:
        given = kwargs.get("size", kwargs.get("shape", args[where] if len(args) > where else None))
        return frozenset({Array(sizes([given]) if given is not None else (), dtype)})
    if name == "linspace":
        num = kwargs.get("num", args[2] if len(args) > 2 else const(50))
        return frozenset({Array((int_of(num),), dtype)})
    if name == "arange" and args:
        ints = [int_of(a) for a in args[:3]]
        n = len(range(*ints)) if None not in ints and ints[-1:] != [0] else None
        return frozenset({Array((n,), "int64" if None not in ints and "dtype" not in kwargs else dtype)})
    a = array_of(args[0]) if args else None
    if a is not None and name in t.elementwise:
        return frozenset({a})
    return None


def array_method(a: Array, name: str, args: list):
    if name == "astype" and args:
        return frozenset({Array(a.shape, dtype_name(args[0]))})
    if name in ("copy", "sort") or name in K.NUMPY_ARRAYS.elementwise:
        return frozenset({a}) if name != "sort" or not args else UNKNOWN
    if name == "reshape":
        shape = reshaped(a.shape, args) if a.shape is not None and None not in a.shape else None
        return frozenset({Array(shape, a.dtype)})
    if name == "flatten":
        return frozenset({Array((numel(a.shape),), a.dtype)})
    return UNKNOWN


def array_binop(op, left, right):
    """Arithmetic of arrays with arrays or Python numbers: the broadcast shape; the array's
    dtype when the other is a Python int or float and it is a float (numpy keeps float32)."""
    arrays = [x for x in (array_of(left), array_of(right)) if x is not None]
    others = [v for v in (left, right) if array_of(v) is None]
    if isinstance(op, ast.MatMult) or len(arrays) + len(others) != 2:
        return UNKNOWN
    if not all(v and all(isinstance(x, Num) or isinstance(x, Const) and type(x.value) in (int, float) for x in v)
               for v in others):
        return UNKNOWN
    shape = broadcast([x.shape for x in arrays] + [() for _ in others])
    dtypes = {x.dtype for x in arrays}
    (dtype,) = dtypes if len(dtypes) == 1 else (None,)
    return frozenset({Array(shape, dtype if dtype in _FLOATS else None)})


def array_index(a: Array, index):
    return frozenset({Array(indexed(a.shape, index), a.dtype)})


def tensor_from_array(last: str, a: Array):
    """(shape, dtype) of `torch.<last>(array)`, or None when it is no conversion of one."""
    t = K.NUMPY_ARRAYS
    if last in t.keep_dtype:
        return a.shape, a.dtype
    if last in t.float32:
        return a.shape, "float32"
    return None


class Arrays:
    """Mixed into the interpreter: an array's attributes (`x.shape` is a sequence of sizes)."""

    def array_attribute(self, a: Array, name: str, st, node):
        if name == "shape":
            return self.sequence_of_sizes(a.shape, st, node)
        if name == "T":
            return frozenset({Array(tuple(reversed(a.shape)) if a.shape is not None else None, a.dtype)})
        if name == "ndim" and a.shape is not None:
            return const(len(a.shape))
        return frozenset({Method(frozenset({a}), name)}) if name.isidentifier() else UNKNOWN
