"""The rule registry: every rule GradGuard has, in code order.

Codes are stable: GG0xx rules predict a runtime error, GG1xx rules are advisory."""
from __future__ import annotations

from gradguard.rules.accumulated_graph import AccumulatedGraph
from gradguard.rules.base import Rule
from gradguard.rules.freed_graph import FreedGraph
from gradguard.rules.grad_unused import GradUnused
from gradguard.rules.inference_tensor import InferenceTensor
from gradguard.rules.inplace_saved import InplaceSaved
from gradguard.rules.leaf_inplace import LeafInplace
from gradguard.rules.missing_zero_grad import MissingZeroGrad
from gradguard.rules.no_grad_fn import NoGradFn
from gradguard.rules.nonleaf_grad import NonLeafGrad
from gradguard.rules.nonleaf_optimizer import NonLeafOptimizer
from gradguard.rules.nonscalar_backward import NonScalarBackward
from gradguard.rules.numpy_requires_grad import NumpyRequiresGrad
from gradguard.rules.requires_grad_nonleaf import RequiresGradNonLeaf
from gradguard.rules.unused_noqa import UnusedNoqa

ALL_RULES: list[type[Rule]] = [FreedGraph, InplaceSaved, LeafInplace, NoGradFn, NumpyRequiresGrad, NonScalarBackward,
                               NonLeafOptimizer, RequiresGradNonLeaf, InferenceTensor, GradUnused,
                               UnusedNoqa, NonLeafGrad, AccumulatedGraph, MissingZeroGrad]
PREDICTS = ("freed_graph", "inplace_version", "leaf_inplace", "no_grad_fn", "numpy_requires_grad", "nonscalar_backward",
            "nonleaf_optimizer", "requires_grad_nonleaf", "inference_tensor", "grad_unused")


def rule_by_code(code: str) -> type[Rule] | None:
    code = code.upper()
    return next((r for r in ALL_RULES if r.code == code), None)
