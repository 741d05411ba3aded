"""Datasets and data loaders: what a training loop's batches are.

`DataLoader(TensorDataset(x, y))` and `DataLoader(MyDataset(...))` of a project Dataset class
give batches collated as torch's default collate does: rows stacked into a new tensor, which
carries the graph of the tensor they came from (encoder outputs handed to a density model's
`fit`: every batch backpropagates into that one graph).  A batch is made when a loop reads it,
in the grad mode there: inside `torch.inference_mode()` (a validation loop) an inference
tensor.  A loop over a loader runs when the dataset's length is known and not 0.  Every batch
has `batch_size` rows when a `TensorDataset`'s length is a multiple of it (or `drop_last`);
otherwise how many rows is not known (the last batch may have one).
"""
from __future__ import annotations

from dataclasses import replace

from gradguard.engine.values import UNKNOWN, Const, Num, Obj, Tensor, Tup, const, int_of, item_attr, \
    map_tensors, objs_of, tensor_of


ROWS = "<rows>"  # on a TensorDataset: how many rows each of its tensors has


class Datasets:
    """Mixed into the interpreter (it calls functions and makes sequences)."""

    def tensor_dataset(self, args, st, node):
        """`TensorDataset(x, y)`: a sequence of `(x[i], y[i])`, not empty when the first
        tensor's length is known and not 0.  Each row carries its tensor's graph (encoder
        outputs given to a flow's `fit`: every batch backpropagates into that one graph)."""
        tensors = [tensor_of(a) if len(a) == 1 else None for a in args]
        if not tensors or any(t is None for t in tensors):
            return UNKNOWN
        rows = tuple(self.batch_of(t, t.shape[1:] if t.shape else None) for t in tensors)
        n = tensors[0].shape[0] if tensors[0].shape else None
        out = self.make_sequence(frozenset({Tup(rows)}), st, node, nonempty=isinstance(n, int) and n > 0 or None)
        if isinstance(n, int) and all(t.shape and t.shape[0] == n for t in tensors):
            st.set_attr(next(iter(out)).id, ROWS, const(n))  # its length, for the batches a loader makes
        return out

    def data_loader(self, args, kwargs, st, node):
        """`DataLoader(dataset, batch_size=..., drop_last=...)` over a dataset whose items are
        known tensors: batches of the same tensors stacked (with their graphs), the loop over it
        runs when the dataset is not empty (and `drop_last` is off)."""
        dataset = kwargs.get("dataset", args[0] if args else UNKNOWN)
        if kwargs.get("collate_fn") is not None:
            return UNKNOWN
        if len(dataset) == 1 and objs_of(dataset, "instance"):
            return self.dataset_loader(objs_of(dataset, "instance")[0], kwargs, st, node)
        if len(dataset) != 1 or not objs_of(dataset, "list"):
            return UNKNOWN
        elems = self.iter_elements(dataset, st)
        (elem,) = tuple(elems) if len(elems) == 1 else (None,)
        parts = elem.items if isinstance(elem, Tup) else (frozenset({elem}),) if isinstance(elem, Tensor) else None
        if parts is None or any(tensor_of(p) is None or len(p) != 1 for p in parts):
            return UNKNOWN
        rows = [tensor_of(p) for p in parts]  # stacked: a batch of the rows' shape
        drop_last = self.truth_of(kwargs["drop_last"]) if "drop_last" in kwargs else False
        # every batch has `batch_size` rows when the dataset's length is a multiple of it (or the rest is
        # dropped) and the default sampler takes them all; otherwise how many is not known
        n = int_of(st.get_attr(next(iter(dataset)).id, ROWS) or UNKNOWN)
        size = int_of(kwargs.get("batch_size", args[1] if len(args) > 1 else const(1)))
        exact = size if n and size and size > 0 and (n % size == 0 or drop_last is True) and \
            not kwargs.keys() & {"sampler", "batch_sampler"} and len(args) <= 2 else None
        batches = tuple(self.batch_of(t, (exact,) + t.shape if t.shape is not None else None) for t in rows)
        nonempty = self.is_nonempty(dataset, st) and drop_last is False or None
        return self.make_sequence(frozenset({Tup(batches)}) if isinstance(elem, Tup) else batches[0], st, node,
                                  nonempty=nonempty)

    def dataset_loader(self, ds: Obj, kwargs, st, node):
        """`DataLoader(MyDataset(...))` of a project Dataset class: each batch is what its
        `__getitem__` returns, collated as torch's default collate does (tensors stacked, numbers
        made tensors, tuples and dicts item by item); the loop runs when `__len__` is known and
        not 0 (and `drop_last` is off)."""
        cls = self.cx.obj_class.get(ds.id)
        getitem = self.class_lookup(cls, "__getitem__", st) if cls is not None else None
        if getitem is None:
            return UNKNOWN
        batch = self.collate(self.call_value(self.bind_class_member(getitem, ds, st, node), [frozenset({Num()})],
                                             {}, st, node), st, node)
        size = self.class_lookup(cls, "__len__", st)
        n = int_of(self.call_value(self.bind_class_member(size, ds, st, node), [], {}, st, node)) if size else None
        drop_last = self.truth_of(kwargs["drop_last"]) if "drop_last" in kwargs else False
        return self.make_sequence(batch, st, node, nonempty=isinstance(n, int) and n > 0 and drop_last is False or None)

    def batch_read(self, elem):
        """What a loop reads: a DataLoader's batch is made now, so inside `torch.inference_mode()`
        (a validation loop a trainer runs in that mode) it is an inference tensor."""
        site = self.inference_site()
        return elem if site is None else map_tensors(elem, lambda t: replace(t, inference=site) if t.batch else t)

    def collate(self, v, st, node, depth=0):
        """torch's default collate of one dataset item, for a batch of them: a tensor is stacked
        (a new tensor with a batch dimension first), a number becomes a tensor, a tuple or a dict
        of known keys is collated item by item; anything else is unknown."""
        t = tensor_of(v)
        if t is not None and len(v) == 1:
            return self.batch_of(t, (None,) + t.shape if t.shape is not None else None)
        (a,) = tuple(v) if len(v) == 1 and depth < 3 else (None,)
        if isinstance(a, Num) or isinstance(a, Const) and type(a.value) in (int, float):
            return frozenset({Tensor(rg=False, leaf=True, deps=frozenset(), shape=(None,))})
        if isinstance(a, Tup):
            return frozenset({Tup(tuple(self.collate(i, st, node, depth + 1) for i in a.items), a.names)})
        keys = self.keyset(a, st) if isinstance(a, Obj) and a.kind == "dict" else None
        if keys is not None and all(isinstance(k, str) for k in keys):
            keys = sorted(keys)
            return self.new_dict(node, [const(k) for k in keys],
                                 [self.collate(st.get_attr(a.id, item_attr(k)) or UNKNOWN, st, node, depth + 1)
                                  for k in keys], st)
        return UNKNOWN

    @staticmethod
    def batch_of(t: Tensor, shape):
        """Rows of `t` stacked: a tensor of its dtype, new each time a loop reads it, so no
        storage of its own here (an in-place change of one batch is no change of the next),
        and no inference tensor known (it is made where the loop runs, perhaps in another
        mode).  It carries `t`'s graph, if `t` has one, and reaches what `t` reaches."""
        if t.rg is False:
            return frozenset({Tensor(rg=False, leaf=True, deps=frozenset(), shape=shape, dtype=t.dtype, batch=True)})
        return frozenset({Tensor(regions=t.regions, freed=t.freed, dirty=t.dirty, sure=t.sure, rg=t.rg, leaf=False,
                                 deps=None if t.deps is None else t.deps | t.objs, shape=shape, dtype=t.dtype)})
