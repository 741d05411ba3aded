"""The libcst transformer behind the fix for a loss computed with numpy: the same code with torch.

A numpy array carries no autograd graph, so a loss computed on `.detach().cpu().numpy()`
and wrapped back with `torch.tensor(...)` has nothing to backpropagate through.  Written
with torch instead — the chain to numpy dropped, `np.f` turned into `torch.f` with numpy's
keywords renamed, the wrap around the result dropped — the same values keep their graph.
What the table in `knowledge` (NUMPY_TO_TORCH) does not cover makes the port refuse.
"""
from __future__ import annotations

import libcst as cst

from gradguard import knowledge as K

_ATOMS = (cst.Name, cst.Attribute, cst.Subscript, cst.Call, cst.Integer, cst.Float)


class Refused(ValueError):
    """The code uses numpy in a way the port does not know how to write with torch."""


class NumpyToTorch(cst.CSTTransformer):
    def __init__(self, numpy_names: set, torch_name: str):
        super().__init__()
        self.numpy, self.torch, self.table = numpy_names, torch_name, K.NUMPY_TO_TORCH
        self.unwrapped: set = set()  # ids of the expressions a wrap was dropped from, parenthesized

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        f = updated.func
        if not isinstance(f, cst.Attribute):
            return updated
        name, owner = f.attr.value, f.value.value if isinstance(f.value, cst.Name) else None
        if name == "numpy" and not updated.args:  # x.detach().cpu().numpy() -> x
            inner = f.value
            while isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and not inner.args \
                    and inner.func.attr.value in self.table.leave_torch:
                inner = inner.func.value
            return inner
        if owner in self.numpy:
            if name not in self.table.functions:
                raise Refused(f"numpy.{name}")
            return updated.with_changes(func=f.with_changes(value=cst.Name(self.torch),
                                                            attr=cst.Name(self.table.functions[name])),
                                        args=self._renamed(updated.args))
        if owner == self.torch and name in self.table.back_to_torch and updated.args \
                and updated.args[0].keyword is None and all(a.keyword is not None for a in updated.args[1:]):
            value = updated.args[0].value
            if not isinstance(value, _ATOMS) and not value.lpar:
                value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                self.unwrapped.add(id(value))
            return value
        if name in self.table.reductions:
            return updated.with_changes(args=self._renamed(updated.args))
        return updated

    def _renamed(self, args) -> list:
        return [a.with_changes(keyword=cst.Name(self.table.keywords.get(a.keyword.value, a.keyword.value)))
                if a.keyword is not None else a for a in args]

    def _bare(self, value):
        """A statement's whole value needs no parentheses: `return 1 - d.mean()`."""
        if id(value) in self.unwrapped:
            return value.with_changes(lpar=[], rpar=[])
        return value

    def leave_Return(self, original, updated):
        return updated.with_changes(value=self._bare(updated.value)) if updated.value is not None else updated

    def leave_Assign(self, original, updated):
        return updated.with_changes(value=self._bare(updated.value))

    def leave_SimpleStatementLine(self, original, updated):
        """`target = target.numpy()` became `target = target`: drop it (unless it has a comment)."""
        if len(updated.body) == 1 and isinstance(a := updated.body[0], cst.Assign) and len(a.targets) == 1 \
                and isinstance(a.value, cst.Name) and a.targets[0].target.deep_equals(a.value) \
                and updated.trailing_whitespace.comment is None and not any(l.comment for l in updated.leading_lines):
            return cst.RemoveFromParent()
        return updated
