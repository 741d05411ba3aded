"""Tensor shapes, where the program states them: a must fact, None when not known.

A shape is a tuple with one entry per dimension, each a size or None (the rank known, that
size not: a convolution keeps the batch and sets the channels, its height is not worked
out).  Sizes come only from literals (`torch.randn(32, 10)`, `torch.tensor([1., 2.])`,
`nn.Linear(16, 4)`, `nn.Conv2d(3, 8, 3)`) and the ops that carry them on: broadcasting
(torch's `pointwise` tag), reductions (its `reduction` tag: all of the tensor without
`dim`), losses and their `reduction`, `view`/`reshape`/`unsqueeze`/`flatten`,
`stack`/`cat`, `gather`, integer indexing and the layers that keep the batch.  Anything else, and any
size that comes from data (a batch a loader yields), stays unknown: a finding about shapes
(`backward()` of a tensor of 32 elements) rests only on sizes the code itself wrote.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import Optional

from gradguard import knowledge as K
from gradguard.engine.values import (
    EMPTY, NONE, Const, Num, Obj, Span, Tensor, Tup, const, int_of, literal_of, objs_of, surely_several, tensor_of,
)

Shape = Optional[tuple]
FLOATING = frozenset({"float16", "bfloat16", "float32", "float64"})
INDEXING = frozenset({"int8", "int16", "int32", "int64"})  # dtypes that index rows (uint8 and bool mask them)
SIZE = frozenset({Num(size=True)})  # a tensor's size along a dimension, not known
SIZES = "<sizes>"  # on a sequence object: it is a `torch.Size` (`x.shape`), a tuple


def broadcast(shapes: list) -> Shape:
    """The broadcast of shapes of known rank, None if one is unknown or they do not broadcast.
    A size broadcast with an unknown one is that size unless it is 1 (which the other wins)."""
    if any(s is None for s in shapes):
        return None
    out: list = []
    for s in shapes:
        s = tuple(s)
        n = max(len(out), len(s))
        a, b = [1] * (n - len(out)) + out, [1] * (n - len(s)) + list(s)
        merged = []
        for x, y in zip(a, b):
            if x is None or y is None:
                known = y if x is None else x
                merged.append(None if known in (None, 1) else known)
            elif x != y and 1 not in (x, y):
                return None
            else:
                merged.append(y if x == 1 else x)
        out = merged
    return tuple(out)


def matmul(a: Shape, b: Shape) -> Shape:
    """`a @ b` as torch.matmul shapes it: a 1-D operand gets a dimension of 1 (left in front, right
    behind) that the result drops; the sizes before the last two broadcast."""
    if not a or not b:
        return None
    if len(a) == 1 and len(b) == 1:
        return ()
    left = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    right = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    batch = broadcast([left[:-2], right[:-2]])
    if batch is None:
        return None
    out = batch + (left[-2], right[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    return out[:-1] if len(b) == 1 else out


def numel(shape: Shape) -> int | None:
    return None if shape is None or None in shape else prod(shape)


def several(v) -> bool:
    """Whether `v` is surely one tensor with a number of elements other than one."""
    t = tensor_of(v)
    return t is not None and len(v) == 1 and surely_several(t)


def _resized(x: Shape, size) -> Shape:
    """`F.interpolate(x, size)`: `(N, C, *size)`, the spatial sizes unknown when `size` is not
    written (a `scale_factor`)."""
    if x is None or len(x) < 3:
        return None
    n = len(x) - 2
    one = int_of(size) if size is not None else None
    items = next((a.items for a in size if isinstance(a, Tup)), None) if size is not None and len(size) == 1 else None
    spatial = (one,) * n if one is not None else tuple(int_of(i) for i in items) if items and len(items) == n else \
        (None,) * n
    return x[:2] + spatial


def _in_order(values: list, rank: int) -> list | None:
    """Literal dims, in the order written, as non-negative dims of a tensor of `rank`."""
    dims = [int_of(v) for v in values]
    if None in dims or any(not -rank <= d < rank for d in dims):
        return None
    return [d % rank for d in dims]


def _dims(v, rank: int) -> tuple | None:
    """A literal `dim` (an int or a tuple of ints) as the sorted non-negative dims of a tensor of
    `rank`, each once."""
    given = [v] if int_of(v) is not None else \
        list(next(iter(v)).items) if len(v) == 1 and isinstance(next(iter(v)), Tup) else None
    dims = _in_order(given, rank) if given is not None and rank else None
    return tuple(sorted(set(dims))) if dims is not None else None


def pieces(shape: Shape, name: str, bound: dict) -> list | None:
    """The shapes of the tensors `split` and `chunk` return (`x.split(8, dim=-1)`), when the
    sizes are known and they are few."""
    sizes, dim = bound.get("chunks" if name == "chunk" else "split_size"), int_of(bound.get("dim", const(0)))
    if shape is None or sizes is None or dim is None or not -len(shape) <= dim < len(shape):
        return None
    dim %= len(shape)
    total, one = shape[dim], int_of(sizes)
    items = next(iter(sizes)).items if len(sizes) == 1 and isinstance(next(iter(sizes)), Tup) else None
    if total is None or (one is None and items is None) or (one is not None and one <= 0):
        return None
    if one is not None:
        step = -(-total // one) if name == "chunk" else one  # chunk: ceil(size / chunks) each
        lengths = [min(step, total - i) for i in range(0, total, step)] if step else None
    else:
        lengths = [int_of(i) for i in items]
        lengths = None if None in lengths or sum(lengths) != total else lengths
    if not lengths or len(lengths) > 16:
        return None
    return [shape[:dim] + (n,) + shape[dim + 1:] for n in lengths]


def grid(shapes: list, indexing) -> Shape:
    """The shape of each tensor `torch.meshgrid` returns for 1-D inputs of these `shapes`: every
    input's size in order (`indexing="ij"`, the default), the first two swapped for "xy"."""
    how = literal_of(indexing, str) if indexing is not None else "ij"
    if not shapes or how not in ("ij", "xy") or any(sh is None or len(sh) != 1 for sh in shapes):
        return None
    sizes = tuple(sh[0] for sh in shapes)
    return sizes[1::-1] + sizes[2:] if how == "xy" and len(sizes) > 1 else sizes


def reduced(shape: Shape, dim, keepdim) -> Shape:
    """A reduction over `dim` (all of it when `dim` is not given or None)."""
    if dim is None or dim == frozenset({Const(None)}):
        return ()  # `x.sum()`: one element, whatever x is
    if shape is None:
        return None
    dims = _dims(dim, len(shape))
    keep = literal_of(keepdim, bool) if keepdim is not None else False
    if dims is None or keep is None:
        return None
    return tuple(1 if i in dims else n for i, n in enumerate(shape)) if keep else \
        tuple(n for i, n in enumerate(shape) if i not in dims)


def spread(args: list) -> list:
    """The values of sizes or dims given one by one (`f(2, 3)`) or as one tuple (`f((2, 3))`)."""
    one = next(iter(args[0])) if len(args) == 1 and len(args[0]) == 1 else None
    return list(one.items) if isinstance(one, Tup) else args


def sizes(args: list) -> Shape:
    """Sizes given as `f(2, 3)`, `f((2, 3))` or `f([2, 3])` (values); a size that is not a
    literal is unknown (the rank stays known)."""
    args = spread(args)
    if not args or any(not all(isinstance(a, (Const, Num)) for a in v) for v in args):
        return None
    dims = [int_of(a) for a in args]
    return tuple(d if d is not None and d >= 0 else None for d in dims)


def reshaped(shape: Shape, args: list) -> Shape:
    """`view`/`reshape` to literal sizes, one of which may be -1."""
    n = numel(shape)
    args = spread(args)
    dims = [int_of(a) for a in args]
    if not dims or dims.count(-1) > 1 or any(not all(isinstance(a, (Const, Num)) for a in v) for v in args):
        return None
    if n is None or None in dims:  # `x.view(x.size(0), -1)`: the sizes written are known
        return tuple(d if d is not None and d >= 0 else None for d in dims)
    known = prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or n % known:
            return None
        dims = [n // known if d == -1 else d for d in dims]
    return tuple(dims) if prod(dims) == n else None


def of(v) -> Shape:
    """The shape of a value: a tensor's, () for a Python number, None otherwise."""
    t = tensor_of(v)
    if t is not None and len(v) == 1:
        return t.shape
    if v and all(isinstance(a, (Const, Num)) and not isinstance(getattr(a, "value", 0), (str, type(None)))
                 for a in v):
        return ()
    return None


def _index_key(v):
    """One part of a tensor index as `indexed` reads it: an int, a Span, None, Ellipsis, or
    `_OPAQUE` (a tensor, a list, a value not known)."""
    if len(v) == 1:
        (a,) = tuple(v)
        if isinstance(a, Const) and (type(a.value) in (int, Span) or a.value is None or a.value is Ellipsis):
            return a.value
    return _OPAQUE


_OPAQUE = object()


def indexed(shape: Shape, index) -> Shape:
    """The shape of basic indexing: an int drops its dimension, a slice with known bounds cuts
    it (to a known size where the dimension's is), None adds a dimension of 1, `...` stands
    for the dimensions not named.  Anything else (a tensor or list index, an unknown bound)
    leaves the shape unknown."""
    if shape is None:
        return None
    parts = tuple(index)[0].items if len(index) == 1 and isinstance(next(iter(index)), Tup) else (index,)
    keys = [_index_key(p) for p in parts]
    if any(k is _OPAQUE for k in keys) or sum(k is Ellipsis for k in keys) > 1:
        return None
    named = sum(k is not None and k is not Ellipsis for k in keys)
    if named > len(shape):
        return None
    rest = [Span()] * (len(shape) - named)
    at = next((i for i, k in enumerate(keys) if k is Ellipsis), len(keys))
    keys = keys[:at] + rest + keys[at + 1:]
    out, dims = [], iter(shape)
    for k in keys:
        if k is None:
            out.append(1)
            continue
        n = next(dims)
        if isinstance(k, int):
            if n is not None and not -n <= k < n:
                return None  # an IndexError, not a shape
        elif k.step is not None and k.step < 0:
            return None
        elif k == Span():
            out.append(n)
        else:
            out.append(None if n is None else len(range(n)[k.lower:k.upper:k.step]))
    return tuple(out)


def _per_dim(v, rank: int) -> tuple | None:
    """A layer's `kernel_size=3` or `(3, 1)` as one int per spatial dimension."""
    one = int_of(v)
    if one is not None:
        return (one,) * rank
    items = literal_of(v, tuple) if v else None
    if len(v) == 1 and isinstance(next(iter(v)), Tup):
        items = tuple(int_of(i) for i in next(iter(v)).items)
    return items if items and len(items) == rank and None not in items else None


def geometry(cls_name: str, args: list, kwargs: dict) -> tuple | None:
    """What a convolution or pooling layer's construction fixes of its spatial output:
    (kind, kernel, stride, padding, dilation, output_padding), one int per dimension each,
    or (kind, output_size) for adaptive pooling; None when a size is not a literal, or a
    mode (`ceil_mode`, string padding other than 'same') changes the formula."""
    found = K.LAYER_GEOMETRY.get(cls_name)
    if found is None:
        return None
    kind, rank, params = found
    given = dict(zip(params, args)) | {k: v for k, v in kwargs.items() if k in params}
    if kind == "adaptive_pool":
        v = given.get("output_size")
        if v is not None and len(v) == 1 and isinstance(next(iter(v)), Tup):  # `(None, 7)`: None keeps the size
            sizes = tuple(int_of(i) if i != frozenset({Const(None)}) else -1 for i in next(iter(v)).items)
            return (kind, sizes) if len(sizes) == rank and None not in sizes else None
        sizes = _per_dim(v, rank) if v is not None else None
        return (kind, sizes) if sizes else None
    if "ceil_mode" in given and literal_of(given["ceil_mode"], bool) is not False:
        return None  # rounding up, or not known
    kernel = _per_dim(given["kernel_size"], rank) if "kernel_size" in given else None
    pad = given.get("padding")
    if pad is not None and literal_of(pad, str) is not None:
        if literal_of(pad, str) != "same" or kind != "conv":
            return None
        padding = "same"
    else:
        padding = _per_dim(pad, rank) if pad is not None else (0,) * rank
    stride = _per_dim(given["stride"], rank) if given.get("stride", frozenset({Const(None)})) != frozenset(
        {Const(None)}) else (1,) * rank if kind.startswith("conv") else kernel
    dilation = _per_dim(given["dilation"], rank) if "dilation" in given else (1,) * rank
    extra = _per_dim(given["output_padding"], rank) if "output_padding" in given else (0,) * rank
    if None in (kernel, padding, stride, dilation, extra):
        return None
    return kind, kernel, stride, padding, dilation, extra


def spatial(geo: tuple | None, sizes: tuple) -> tuple:
    """The spatial sizes a layer of this geometry returns for `sizes` (each known or None),
    by the formulas of torch's documentation; None where an input size is not known."""
    if geo is None or not sizes:
        return (None,) * len(sizes)
    if geo[0] == "adaptive_pool":
        out = geo[1]
        if len(out) != len(sizes):
            return (None,) * len(sizes)
        return tuple(n if o == -1 else o for o, n in zip(out, sizes))
    kind, kernel, stride, padding, dilation, extra = geo
    if len(kernel) != len(sizes):
        return (None,) * len(sizes)
    out = []
    for i, n in enumerate(sizes):
        k, s, d = kernel[i], stride[i], dilation[i]
        if n is None or s <= 0:
            out.append(None)
        elif padding == "same":
            out.append(n)
        elif kind == "conv_transpose":
            out.append((n - 1) * s - 2 * padding[i] + d * (k - 1) + extra[i] + 1)
        elif kind == "avg_pool":
            out.append((n + 2 * padding[i] - k) // s + 1)
        else:
            out.append((n + 2 * padding[i] - d * (k - 1) - 1) // s + 1)
    return tuple(o if o is None or o > 0 else None for o in out)


def _functional_layer(name: str) -> str | None:
    """The pooling layer a functional pooling op computes as (`max_pool2d`: `MaxPool2d`)."""
    for prefix, cls in (("adaptive_avg_pool", "AdaptiveAvgPool"), ("adaptive_max_pool", "AdaptiveMaxPool"),
                        ("max_pool", "MaxPool"), ("avg_pool", "AvgPool")):
        if name.startswith(prefix) and cls + name[len(prefix):] in K.LAYER_GEOMETRY:
            return cls + name[len(prefix):]
    return None


def size_items(shape: Shape, size) -> tuple | None:
    """`x.shape` item by item: each size known where the shape knows it, `size` (some size)
    elsewhere; None when the rank is not known."""
    return None if shape is None else tuple(frozenset({Const(n)}) if n is not None else size for n in shape)


def nested(v, exact_items, depth: int = 0) -> Shape:
    """The shape of `torch.tensor(data)` for nested literal lists of numbers."""
    if depth > 4:
        return None
    if v and all(isinstance(a, (Const, Num)) for a in v):
        return () if all(not isinstance(getattr(a, "value", 0), (str, type(None))) for a in v) else None
    items = exact_items(v)
    if items is None:
        return None
    inner = [nested(i, exact_items, depth + 1) for i in items]
    if not inner:
        return (0,)
    if any(s is None for s in inner) or len(set(inner)) != 1:
        return None
    return (len(items),) + inner[0]


class Shapes:
    """Mixed into the interpreter: the shape of what factories, ops and layers return."""

    def with_shape(self, v, shape: Shape):
        """`v` (one tensor) with its shape known."""
        t = tensor_of(v)
        if shape is None or t is None or len(v) != 1 or t.shape == shape:
            return v
        return frozenset({replace(t, shape=shape)})

    @staticmethod
    def with_several(v, yes: bool):
        """`v` (one tensor of a shape not known) known to have a number of elements other than one, if `yes`."""
        t = tensor_of(v)
        return frozenset({replace(t, several=True)}) if yes and t is not None and len(v) == 1 and \
            not surely_several(t) else v

    def with_broadcast(self, out, operands: list):
        """`out` with the shape an elementwise op of `operands` gives it, or, where that is not
        known, with several elements when an operand has them; as it is when an operand may be
        neither a tensor nor a number (`t == None` is a bool)."""
        if any(of(v) is None and not several(v) for v in operands):
            return out
        shape = broadcast([of(v) for v in operands])
        return self.with_several(self.with_shape(out, shape), shape is None and any(several(v) for v in operands))

    def keeps_several(self, info, bound) -> bool:
        """Whether an op's result surely has a number of elements other than one because an
        operand has: broadcasting never turns a size other than 1 into 1 (torch's pointwise ops),
        and ops that keep the shape or reshape keep the count."""
        if "pointwise" in info.tags:
            return any(several(v) for p, v in bound.items() if p in info.tensor_params)
        if info.name.split(".")[-1] in K.SAME_SHAPE_OPS | K.SAME_NUMEL_OPS:
            first = next((p for p in info.params if p in info.tensor_params and p in bound), None)
            return several(bound.get("self", bound.get(first, EMPTY)))
        return False

    def with_dtype(self, v, dtype):
        """`v` (one tensor) with its dtype known."""
        t = tensor_of(v)
        if dtype is None or t is None or len(v) != 1 or t.dtype == dtype:
            return v
        return frozenset({replace(t, dtype=dtype)})

    def with_device(self, v, info, bound: dict):
        """`v` (one tensor) on the device an op's tensor operands share: an op computes where its
        inputs live (`x.permute(...)` of a CPU tensor is on the CPU).  Not known when an operand
        may be a tensor not known to be one, names no device, or when the op chooses one (a
        `device` parameter, `to`, which `cuda()` and `cpu()` resolve to, an op the data lacks)."""
        t = tensor_of(v)
        if t is None or len(v) != 1 or t.device is not None or "device" in info.params or not info.known \
                or info.name.split(".")[-1] == "to":
            return v
        devices = set()
        for p in info.tensor_params:
            a = bound.get(p)
            if a is None or a == NONE:
                continue
            operand = tensor_of(a)
            if operand is None or len(a) != 1 or operand.device is None:
                return v
            devices.add(operand.device)
        return frozenset({replace(t, device=devices.pop())}) if len(devices) == 1 else v

    def op_dtype(self, info, bound: dict):
        """The dtype of an arithmetic op's result: the floating dtype its tensor operands share,
        when every other operand is a Python int or float (no promotion then)."""
        if info.name.split(".")[-1] not in K.SAME_DTYPE_OPS:
            return None
        dtypes = set()
        for v in bound.values():
            t = tensor_of(v)
            if t is not None and len(v) == 1:
                dtypes.add(t.dtype)
            elif not all(isinstance(a, Num) or isinstance(a, Const) and type(a.value) in (int, float) for a in v):
                return None
        (dtype,) = dtypes if len(dtypes) == 1 else (None,)
        return dtype if dtype in FLOATING else None

    def factory_shape(self, last: str, args: list, kwargs: dict, st) -> Shape:
        rule = K.FACTORY_SHAPES.get(last)
        if rule == "sizes":
            given = [kwargs["size"]] if "size" in kwargs else args
            if len(given) == 1 and objs_of(given[0], "list"):  # `torch.randn(x.size())`: a list of sizes
                given = list(self.exact_items(given[0], st) or given)
            return sizes(given)
        if rule == "first":
            return sizes(args[:1]) if args else None
        if rule == "last":
            given = kwargs.get("size") or (args[-1] if args else None)
            return sizes([given]) if given is not None and len(given) == 1 and \
                isinstance(next(iter(given)), Tup) else None
        if rule == "like":
            return of(args[0]) if args else None
        if rule == "range":  # `torch.arange(n)`, `arange(start, end, step)` of ints
            bounds = [int_of(a) for a in args[:3]]
            return (len(range(*bounds)),) if args and not kwargs.keys() - {"dtype", "device", "requires_grad"} \
                and None not in bounds and bounds[-1] != 0 else None
        if rule == "steps":  # `torch.linspace(start, end, steps)`
            steps = int_of(kwargs["steps"] if "steps" in kwargs else args[2] if len(args) > 2 else EMPTY)
            return (steps,) if steps is not None and steps >= 0 else None
        if rule == "data":
            return nested(args[0], lambda x: self.exact_items(x, st)) if args else None
        return None

    def op_shape(self, info, bound: dict, st) -> Shape:
        """The shape of an op's result from its inputs' shapes, when torch's tags or the
        op's kind say how it follows them."""
        name = info.name.split(".")[-1]
        if "pointwise" in info.tags:
            shapes = [of(v) for p, v in bound.items() if p in info.tensor_params or of(v) == ()]
            return broadcast(shapes) if shapes else None
        if "reduction" in info.tags and "self" in bound:
            return reduced(of(bound["self"]), bound.get("dim"), bound.get("keepdim"))
        loss = K.LOSS_SHAPES.get(name)
        if loss is not None:
            return self.loss_shape(loss, bound, bound.get("reduction"), bound.get("reduce"))
        if name == "flatten" and "self" in bound:  # `torch.flatten(x, 1)`
            return self.method_shape("flatten", tensor_of(bound["self"]) or Tensor(),
                                     [bound["start_dim"]] if "start_dim" in bound else [], {}) \
                if "end_dim" not in bound else None
        if name in ("outer", "ger") and "self" in bound and "vec2" in bound:
            a, b = of(bound["self"]), of(bound["vec2"])
            return a + b if a is not None and b is not None and len(a) == len(b) == 1 else None
        if name == "multinomial" and "self" in bound:  # `num_samples` indices per row of probabilities
            p, n = of(bound["self"]), int_of(bound.get("num_samples", EMPTY))
            return p[:-1] + (n,) if p and n is not None else None
        if name == "t" and "self" in bound:  # `torch.t(x)`: a matrix transposed, a vector as it is
            x = of(bound["self"])
            return x[::-1] if x is not None and len(x) <= 2 else None
        if name == "diag" and "self" in bound and int_of(bound.get("diagonal", const(0))) == 0:
            x = of(bound["self"])  # a vector's diagonal matrix, a square matrix's diagonal
            return (x[0], x[0]) if x is not None and len(x) == 1 else (x[0],) if x is not None and len(x) == 2 \
                and x[0] is not None and x[0] == x[1] else None
        if name == "cosine_similarity" and "x1" in bound and "x2" in bound:  # the broadcast, without `dim`
            return reduced(broadcast([of(bound["x1"]), of(bound["x2"])]), bound.get("dim", const(1)), const(False))
        if name == "interpolate" and "input" in bound:
            return _resized(of(bound["input"]), bound.get("size"))
        if name == "scaled_dot_product_attention" and "query" in bound and "value" in bound:
            q, v = of(bound["query"]), of(bound["value"])  # (..., L, E) and (..., S, Ev): (..., L, Ev)
            return q[:-1] + v[-1:] if q and v and len(q) == len(v) else None
        pooled = _functional_layer(name)
        if pooled is not None:  # `F.max_pool2d(x, 2)`: the formula of the layer `nn.MaxPool2d(2)`
            first = next((p for p in info.params if p in info.tensor_params), None)
            x = of(bound[first]) if first in bound else None
            rank = K.LAYER_GEOMETRY[pooled][1]
            if not x or len(x) not in (rank + 1, rank + 2):
                return None
            lead = len(x) - rank
            return x[:lead] + spatial(geometry(pooled, [], {k: v for k, v in bound.items() if k != first}), x[lead:])
        if name in K.MATMUL_SHAPE_OPS:
            tensors = [p for p in info.params if p in info.tensor_params]
            return matmul(*(of(bound.get(p, frozenset())) for p in tensors)) if len(tensors) == 2 else None
        if name in K.INDEX_SHAPE_OPS:
            return of(bound["index"]) if "index" in bound else None
        if name in K.SAME_SHAPE_OPS:
            first = next((p for p in info.params if p in info.tensor_params), None)
            return of(bound[first]) if first in bound else None
        return None

    def loss_shape(self, kind: str, bound: dict, reduction, reduce) -> Shape:
        """A loss's result: one element unless `reduction='none'` (or the old `reduce=False`);
        then the broadcast of input and target for an elementwise loss, the batch for a
        class loss on `(N, C)` scores."""
        how = literal_of(reduction, str) if reduction is not None else "mean"
        if reduce is not None and literal_of(reduce, bool) is False and reduction is None:
            how = "none"
        if how is None:
            return None
        if how != "none":
            return ()
        given = [of(v) for p, v in bound.items() if p in ("input", "target", "self")]
        if kind == "elementwise":
            return broadcast(given) if given else None
        scores = of(bound.get("input", bound.get("self", frozenset())))
        return scores[:1] + scores[2:] if scores is not None and len(scores) >= 2 else None  # (N, C, ...) -> (N, ...)

    def method_shape(self, name: str, t: Tensor, args: list, kwargs: dict) -> Shape:
        """Shape methods of a tensor: `view`, `reshape`, `flatten`, `unsqueeze`, `squeeze`, `t`."""
        shape = t.shape
        if shape is None:
            return None
        if name in ("view", "reshape"):
            return reshaped(shape, args)
        if name == "flatten" and not kwargs and len(args) <= 1:
            start = int_of(args[0]) if args else 0
            if start is None or not -len(shape) <= start < max(len(shape), 1):
                return None
            start %= max(len(shape), 1)
            return shape[:start] + (numel(shape[start:]),)
        if name == "unsqueeze" and len(args) == 1:
            d = int_of(args[0])
            if d is None or not -len(shape) - 1 <= d <= len(shape):
                return None
            d %= len(shape) + 1
            return shape[:d] + (1,) + shape[d:]
        if name == "squeeze" and not args and not kwargs and None not in shape:
            return tuple(n for n in shape if n != 1)
        if name == "squeeze" and len(args) == 1 and not kwargs:  # `x.squeeze(-1)`: that dim goes if it is 1
            d = _dims(args[0], len(shape))
            if d is None or any(shape[i] is None for i in d):
                return None
            return tuple(n for i, n in enumerate(shape) if not (i in d and n == 1))
        if name in ("transpose", "swapaxes", "swapdims") and len(args) == 2 and not kwargs:
            d = _in_order(args, len(shape))
            if d is None:
                return None
            out = list(shape)
            out[d[0]], out[d[1]] = shape[d[1]], shape[d[0]]
            return tuple(out)
        if name == "permute" and args and not kwargs:  # `x.permute(0, 2, 1)` or `x.permute((0, 2, 1))`
            d = _in_order(spread(args), len(shape))
            return tuple(shape[i] for i in d) if d is not None and sorted(d) == list(range(len(shape))) else None
        if name == "t" and len(shape) <= 2:
            return tuple(reversed(shape))
        if name in ("expand", "repeat") and args and not kwargs:
            # `x.expand(4, -1, -1)`: -1 keeps a size, a new leading dimension is added; `x.repeat(1, 8)`:
            # each size times its count
            given = [int_of(a) for a in spread(args)]
            lead = len(given) - len(shape)
            if lead < 0:
                return None
            old = (None,) * lead + tuple(shape)
            if name == "expand":
                return tuple(old[i] if d == -1 and i >= lead else None if d is None or d < 0 else d
                             for i, d in enumerate(given))
            return tuple(d if i < lead else None if d is None or old[i] is None else d * old[i]
                         for i, d in enumerate(given))
        return None

    def sizes(self, v, st, node):
        """`x.shape`, `x.size()`: a sequence of sizes, known one by one where the shape is."""
        return self.sequence_of_sizes(of(v), st, node)

    def sequence_of_sizes(self, shape: Shape, st, node):
        """`x.shape`: a `torch.Size` (a tuple), item by item when the rank is known."""
        items = size_items(shape, SIZE)
        out = self.make_sequence(SIZE, st, node) if items is None else \
            self.make_sequence(frozenset().union(*items), st, node, nonempty=bool(items), items=items)
        for a in objs_of(out, "list"):
            st.set_attr(a.id, SIZES, const(True))
        return out

    def size_along(self, v, dim):
        """`x.size(1)`, `x.shape[1]`, `len(x)`: that size when the shape knows it."""
        shape, d = of(v), int_of(dim)
        if shape is None or d is None or not -len(shape) <= d < len(shape) or shape[d] is None:
            return SIZE
        return frozenset({Const(shape[d])})

    def indexed_shape(self, t: Tensor, index) -> Shape:
        """`x[i]`, `x[:, 2:5]`, `x[..., None]`: see `indexed`."""
        return indexed(t.shape, index)

    def joined_shape(self, name: str, items, dim, elements=None) -> Shape:
        """`torch.stack(xs)` / `torch.cat(xs)` along a literal dim of known, equal shapes; when
        the items are not known one by one (a list grown in a loop) but every element `elements`
        may be has one shape, the same with their number not known."""
        if not items and elements and all(isinstance(a, Tensor) for a in elements) \
                and len({a.shape for a in elements}) == 1:
            # as if two were joined, the size along `dim` then not known (a bad `dim` is None there)
            joined = self.joined_shape(name, [frozenset({next(iter(elements))})] * 2, dim)
            d = int_of(dim) % len(joined) if joined is not None and dim is not None else 0
            return joined[:d] + (None,) + joined[d + 1:] if joined is not None else None
        shapes = [of(i) for i in items] if items else None
        if not shapes or any(s is None for s in shapes):
            return None
        d = int_of(dim) if dim is not None else 0
        if d is None:
            return None
        if name == "stack":
            if len(set(shapes)) != 1 or not -len(shapes[0]) - 1 <= d <= len(shapes[0]):
                return None
            d %= len(shapes[0]) + 1
            return shapes[0][:d] + (len(shapes),) + shapes[0][d:]
        if name in ("cat", "concat", "concatenate"):
            rank = len(shapes[0])
            if not rank or any(len(s) != rank for s in shapes) or not -rank <= d < rank:
                return None
            d %= rank
            if any(s[:d] + s[d + 1:] != shapes[0][:d] + shapes[0][d + 1:] for s in shapes):
                return None
            joined = None if any(s[d] is None for s in shapes) else sum(s[d] for s in shapes)
            return shapes[0][:d] + (joined,) + shapes[0][d + 1:]
        return None

    def layer_sizes(self, cls_name: str, info, args: list, kwargs: dict) -> dict:
        """What a layer's construction says of the shapes it returns: a Linear's
        `out_features`, a convolution's `out_channels` and a convolution's or pooling layer's
        `<geometry>` (see `geometry`), a loss's `reduction` (or `reduce`)."""
        if cls_name == "Linear":
            out = kwargs.get("out_features", args[1] if len(args) > 1 else None)
            return {"<out_features>": out} if out is not None else {}
        if cls_name == "Embedding":  # a row of `embedding_dim` per index
            dim = kwargs.get("embedding_dim", args[1] if len(args) > 1 else None)
            return {"<embedding_dim>": dim} if dim is not None else {}
        sizes = {"<geometry>": frozenset({Const(g)})} if (g := geometry(cls_name, args, kwargs)) else {}
        if cls_name in K.LAYER_SHAPES.get("channels", ()):
            out = kwargs.get("out_channels", args[1] if len(args) > 1 else None)
            return sizes | ({"<out_channels>": out} if out is not None else {})
        if sizes:
            return sizes
        if info.op in K.LOSS_SHAPES:
            return {f"<{k}>": kwargs[k] for k in ("reduction", "reduce") if k in kwargs}
        return {}

    def layer_shape(self, m: Obj, kind: str, args: list, st, extra: bool = False) -> Shape:
        """The shape a torch.nn layer returns for `args` (`extra`: the call passes more than
        its input, as a transposed convolution's `output_size`)."""
        info = self.builtin_info(m)
        if info is None or not args:
            return None
        if kind == "Linear":
            return self.linear_shape(m, args[0], st)
        x = of(args[0])
        if kind == "Embedding":
            dim = int_of(st.get_attr(m.id, "<embedding_dim>") or frozenset())
            return x + (dim,) if x is not None and dim is not None else None
        channels = kind in K.LAYER_SHAPES.get("channels", ())
        if x and (channels or kind in K.LAYER_SHAPES.get("keep_batch_and_channels", ())):
            geo = literal_of(st.get_attr(m.id, "<geometry>") or frozenset(), tuple) if not extra else None
            rank = K.LAYER_GEOMETRY[kind][1] if kind in K.LAYER_GEOMETRY else len(x) - 2
            # (N, C, *spatial), or unbatched (C, *spatial): which one, the layer's rank says
            lead = 1 if len(x) == rank + 2 else 0 if len(x) == rank + 1 else None
            if lead is None or rank < 1:
                return None
            out = int_of(st.get_attr(m.id, "<out_channels>") or frozenset()) if channels else x[lead]
            return x[:lead] + (out,) + spatial(geo, x[lead + 1:])
        if kind in K.LAYER_SHAPES.get("flatten", ()) and x:
            return x[:1] + (numel(x[1:]),)
        loss = K.LOSS_SHAPES.get(info.op)
        if loss is not None and len(args) >= 2:
            return self.loss_shape(loss, {"input": args[0], "target": args[1]}, st.get_attr(m.id, "<reduction>"),
                                   st.get_attr(m.id, "<reduce>"))
        return of(args[0]) if info.op in K.SAME_SHAPE_OPS else None

    def linear_shape(self, m: Obj, x, st) -> Shape:
        """`nn.Linear(in, out)(x)`: x's shape with its last size `out`."""
        out = int_of(st.get_attr(m.id, "<out_features>") or frozenset())
        shape = of(x)
        return shape[:-1] + (out,) if out is not None and shape else None
