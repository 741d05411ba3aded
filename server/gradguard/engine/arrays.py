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
from gradguard.engine.values import NONE, UNKNOWN, Array, Const, Method, Num, Ref, const, int_of

_FLOATS = frozenset({"float16", "float32", "float64"})
_DTYPES = _FLOATS | {"int8", "int16", "int32", "int64", "uint8", "bool"}
_NAMES = {"float": "float64", "double": "float64", "int": "int64", "single": "float32", "half": "float16",
          "bool_": "bool"}


def array_of(v) -> Array | None:
    """The array `v` surely is, or None."""
    (a,) = tuple(v) if len(v) == 1 else (None,)
    return a if isinstance(a, Array) else None


def dtype_name(v) -> str | None:
    """numpy's name of a dtype written `np.float32`, `"float32"`, `float` or `torch.float32`;
    None for any other spelling (`"f4"`, `np.intc`)."""
    (a,) = tuple(v) if len(v) == 1 else (None,)
    name = a.value if isinstance(a, Const) and isinstance(a.value, str) else \
        a.dotted.rsplit(".", 1)[-1] if isinstance(a, Ref) else None
    name = _NAMES.get(name, name)
    return name if name in _DTYPES else None


def fill_dtype(v, floating: str | None) -> str | None:
    """`np.full(shape, fill)`, `torch.full(size, fill)`: the dtype a literal fill gives, a float
    fill giving `floating` (numpy's float64, torch's default dtype)."""
    (a,) = tuple(v) if len(v) == 1 else (None,)
    kind = type(a.value) if isinstance(a, Const) else None
    return {bool: "bool", int: "int64", float: floating}.get(kind)


def call_numpy(name: str, args: list, kwargs: dict):
    """`numpy.<name>(...)`: an array when numpy states its shape or dtype, else None (a call
    with keywords the model does not read, a draw without a size: a Python float)."""
    t = K.NUMPY_ARRAYS
    if name in t.generators:  # `rng = np.random.default_rng(0)`: `rng.normal(size=3)` draws as np.random does
        return frozenset({Ref("numpy.random")})
    given_dtype = dtype_name(kwargs["dtype"]) if "dtype" in kwargs else None
    where = t.sizes.get(name)
    if where == "each":
        return frozenset({Array(sizes(args), "int64" if name in t.int_factories else "float64",
                                ndarray=bool(args), unit=name in t.unit_draws)}) if not kwargs else None
    if where is not None:
        if not set(kwargs) <= {"size", "shape", "dtype"}:
            return None
        given = kwargs.get("size", kwargs.get("shape", args[where] if len(args) > where else None))
        if given is None:
            return None  # `np.random.uniform(-1, 1)`: a Python float
        after = where + (2 if name == "full" else 1)  # `np.zeros(shape, np.float32)`: a dtype given by position
        dtype = given_dtype if "dtype" in kwargs else dtype_name(args[after]) if len(args) > after \
            else fill_dtype(args[1], "float64") if name == "full" and len(args) > 1 \
            else None if name == "full" else "int64" if name in t.int_factories else "float64"
        return frozenset({Array(sizes([given]), dtype, ndarray=True, unit=name in t.unit_draws)})
    if name == "random.choice" and set(kwargs) <= {"size", "replace", "p"}:
        # `np.random.choice(n, size)`: an ndarray of that size, of ints when drawn from `range(n)`
        # (of the array's dtype when drawn from one); no size: one item, no array
        size = kwargs.get("size", args[1] if len(args) > 1 else None)
        pool = args[0] if args else None
        if size is None or size == NONE or pool is None:
            return None
        dtype = "int64" if int_of(pool) is not None else array_of(pool).dtype if array_of(pool) else None
        return frozenset({Array(sizes([size]), dtype, ndarray=True)})
    if name == "linspace" and set(kwargs) <= {"num", "dtype"}:
        num = int_of(kwargs.get("num", args[2] if len(args) > 2 else const(50)))
        return frozenset({Array((num if num is not None and num >= 0 else None,),
                                given_dtype if "dtype" in kwargs else "float64", ndarray=True)})
    if name == "arange" and args and set(kwargs) <= {"dtype"}:
        ints = [int_of(a) for a in args[:3]]
        n = len(range(*ints)) if None not in ints and ints[-1:] != [0] else None
        return frozenset({Array((n,), given_dtype if "dtype" in kwargs else "int64" if None not in ints else None,
                                ndarray=True)})
    like = array_of(args[0]) if args and name in ("zeros_like", "ones_like", "empty_like", "full_like") else None
    if like is not None and set(kwargs) <= {"dtype"}:  # the shape of the array, its dtype unless given
        return frozenset({Array(like.shape, given_dtype if "dtype" in kwargs else like.dtype, ndarray=True)})
    a = array_of(args[0]) if len(args) == 1 and not kwargs else None
    if a is not None and name in t.elementwise:  # a float array keeps its dtype (sqrt of ints is float64)
        return frozenset({Array(a.shape, a.dtype if a.dtype in _FLOATS else None, ndarray=_nonscalar(a, a.shape))})
    return None


def joined(name: str, arrays: list, kwargs: dict):
    """`np.stack(arrays)`, `np.concatenate(arrays)`: an ndarray; of arrays known one by one, their
    common dtype, and the shape when the axis is the default and the sizes are known; None if it
    is no join."""
    how = K.NUMPY_ARRAYS.joins.get(name)
    if how is None or not set(kwargs) <= {"axis"}:
        return None
    if not arrays or any(a is None for a in arrays):  # what it joins is not known: an ndarray still
        return frozenset({Array(None, None, ndarray=True)})
    dtypes = {a.dtype for a in arrays}
    shapes = {a.shape for a in arrays}
    shape = None
    if not kwargs and len(shapes) == 1 and None not in shapes and how == "new":
        shape = (len(arrays),) + next(iter(shapes))
    elif not kwargs and how == 0 and all(a.shape for a in arrays) and len({a.shape[1:] for a in arrays}) == 1:
        firsts = [a.shape[0] for a in arrays]
        shape = ((sum(firsts) if None not in firsts else None),) + arrays[0].shape[1:]
    return frozenset({Array(shape, dtypes.pop() if len(dtypes) == 1 else None, ndarray=True)})


def from_numbers(name: str, items: tuple, kwargs: dict):
    """`np.array([1, 2, 3])`, `np.array([])`: the array of a list of Python numbers known item by
    item, of one dimension of their count (float64 when empty or when one is a float, int64 when
    all are ints); None if it is not one."""
    if name not in K.NUMPY_ARRAYS.from_numbers or not set(kwargs) <= {"dtype"}:
        return None
    atoms = [next(iter(i)) if len(i) == 1 else None for i in items]
    if not all(isinstance(a, Num) or isinstance(a, Const) and type(a.value) in (int, float) for a in atoms):
        return None
    kinds = {type(a.value) if isinstance(a, Const) else None for a in atoms}
    dtype = dtype_name(kwargs["dtype"]) if "dtype" in kwargs else "int64" if kinds == {int} else \
        "float64" if None not in kinds else None
    return frozenset({Array((len(items),), dtype, ndarray=True)})


def array_method(a: Array, name: str, args: list):
    if name == "astype" and args:
        return frozenset({Array(a.shape, dtype_name(args[0]), ndarray=a.ndarray)})
    if name == "copy" and not args:
        return frozenset({a})
    if name == "reshape":
        shape = reshaped(a.shape, args) if a.shape is not None and None not in a.shape else None
        return frozenset({Array(shape, a.dtype, ndarray=a.ndarray)})
    if name == "flatten" and not args:
        return frozenset({Array((numel(a.shape),), a.dtype, ndarray=a.ndarray)})
    return UNKNOWN


def array_binop(op, left, right):
    """Arithmetic of arrays with arrays or Python numbers: the broadcast shape; the array's
    dtype when the other is a Python int or float and it is a float (numpy keeps float32)."""
    arrays = [x for x in (array_of(left), array_of(right)) if x is not None]
    others = [v for v in (left, right) if array_of(v) is None]
    if isinstance(op, ast.MatMult):
        return UNKNOWN
    if not all(v and all(isinstance(x, Num) or isinstance(x, Const) and type(x.value) in (int, float) for x in v)
               for v in others):
        return UNKNOWN
    shape = broadcast([x.shape for x in arrays] + [() for _ in others])
    dtypes = {x.dtype for x in arrays}
    (dtype,) = dtypes if len(dtypes) == 1 else (None,)
    return frozenset({Array(shape, dtype if dtype in _FLOATS else None,
                            ndarray=any(_nonscalar(x, shape) for x in arrays))})


def _nonscalar(a: Array, shape) -> bool:
    """Whether numpy's element-wise result of the ndarray `a` is an ndarray: of one dimension or
    more (a 0-d one gives a numpy scalar)."""
    return a.ndarray and shape is not None and len(shape) >= 1


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
            return frozenset({Array(tuple(reversed(a.shape)) if a.shape is not None else None, a.dtype, ndarray=a.ndarray)})
        if name == "ndim" and a.shape is not None:
            return const(len(a.shape))
        return frozenset({Method(frozenset({a}), name)}) if name.isidentifier() else UNKNOWN
