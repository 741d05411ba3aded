#!/usr/bin/env python
"""Regenerate ``server/gradguard/knowledge/ops.json`` from the installed torch wheel.

GradGuard never imports torch while analysing; everything it knows about torch ops
is read from ops.json.  This script produces that file from the sources torch
itself generates its autograd kernels from, so the data can be refreshed for a new
torch release by re-running it::

    python scripts/gen_torch_knowledge.py            # writes the packaged ops.json
    python scripts/gen_torch_knowledge.py -o DIR     # writes DIR/ops.json

Sources (all shipped inside the torch wheel):

* ``torchgen/packaged/ATen/native/native_functions.yaml`` + ``tags.yaml`` parsed by
  ``torchgen.gen.parse_native_yaml``: schemas (params, types, alias annotations,
  variants, dispatch keys).
* ``torchgen/packaged/autograd/derivatives.yaml`` loaded by
  ``torchgen.packaged.autograd.load_derivatives.load_derivatives`` and matched to
  every schema with ``torchgen.api.autograd.match_differentiability_info``, exactly
  as ``gen_autograd.py`` does.  From the resulting ``Derivative`` objects we read
  which SavedAttributes are *tensors* (the C++ types the autograd codegen wraps in
  ``SavedVariable``), and we replicate the codegen's ``guard_for`` rule that decides
  whether a saved input is saved only when one particular gradient is needed or
  whenever the node is created.
* ``torch.nn.functional``: Python signatures of the functional API (``inspect``).

What cannot be read from torch is written down here, in small hand tables:
``DECOMPOSITIONS`` (what a CompositeImplicitAutograd op runs on dense tensors),
``NATIVE_ALIASES`` (composite ops that are plain aliases), ``FUNCTIONAL`` (how
``torch.nn.functional`` functions call into ATen), ``PY_OPS`` (Python-level Tensor
methods and operator dunders) and ``NAME_ALIASES``.

Data model of one op entry (one JSON object per line, keys sorted; a field equal to
its value in the file's "defaults" object is left out - the loader fills it back):

``name``, ``overload``
    the callable name ("add_", "__and__", "relu") and the overload name ("" default).
``ns``
    "aten" (native op: ``torch.X`` / ``Tensor.X`` / ``torch._C._nn.X``; default), "F"
    (Python function of ``torch.nn.functional``), "py" (Python-level Tensor method
    or operator dunder).
``params``, ``kinds``, ``npos``, ``nreq``, ``kwreq``
    formal names in call order; one kind letter per param (T Tensor, t Tensor?,
    L Tensor[], N number/bool, I list of numbers, S str, O anything else); how many
    params are positional (default: all), how many positional ones are required
    (default: npos); required keyword-only params.
``returns``
    kind letters of the outputs ("T" default, "TT" tuple, "L" list, "N", "" None).
``saves``
    differentiable input -> tensors autograd saves when that input requires grad:
    param names, "result" (output 0, or each element of a Tensor[] output) or
    "resultK" (output K).  Replicates the codegen: a saved input is saved only for
    the gradient(s) whose formula uses it when ``guard_for`` emits a guard, else
    whenever the node is created; saved outputs always.  For in-place ops a saved
    ``self`` is omitted: the codegen saves a private clone (``original_self``).
``tags``
    torch's own tags that say how the result's shape follows the inputs': ``pointwise``
    (the broadcast shape), ``reduction`` (the input reduced over ``dim``, all of it without).
``fields``
    the names of a named tuple's outputs (``values``, ``indices`` of ``max.dim``).
``differentiable``, ``diff_out``
    whether the output gets a grad_fn when an input requires grad (default true);
    indices of the differentiable outputs when not all tensor outputs are.
``view``, ``inplace``
    output may alias ``self`` (alias annotation ``Tensor(a)``, or torchgen's
    RETURNS_VIEWS_OF_INPUT: reshape/contiguous/to may return self); op writes
    ``self`` (``Tensor(a!)`` in-place schema).
``via``
    where ``saves`` comes from: formula (derivatives.yaml; default), decomposition
    (hand table, computed from the primitives' data; ``any_of`` alternatives are
    unioned), alias, formula-proxy (composite op whose derivatives.yaml entry only
    applies to other dispatch keys), conservative (nothing known: every tensor input
    saved for every differentiable input), not-implemented (an AutogradNotImplemented
    grad_fn that raises in backward; also ``notimpl``), manual (hand-written autograd
    kernel), none (not differentiable).
``decomposes_to``
    primitive op keys the saves were computed from.
``inplace_param``
    (F) the boolean parameter that selects the in-place overload ``"inplace"``.
``variants``, ``module``
    "f" / "m" / "fm" (function, method); python_module ("nn", "linalg", ...).

Beside the ops: ``python_keywords`` (``torch.functional``'s Python spellings of ATen tensor
params) and ``python_defaults`` (ATen params a Python-level wrapper, ``torch.norm`` or
``Tensor.split``, gives a default; under "function" and "method", by how the call is written).

Output: ~250 KB, ~1400 ops.  Runtime: ~3-5 s (torchgen's YAML + formula parsing).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import time

OUT_DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "server", "gradguard", "knowledge")

NUMBER_TYPES = {"int", "float", "bool", "Scalar", "SymInt", "SymBool", "SymFloat"}

# Ops whose autograd kernel is hand-written (torchgen's MANUAL_AUTOGRAD set):
# name -> (differentiable, saves by input, view, inplace)
MANUAL = {
    "copy_": (True, {"self": [], "src": []}),
    # flips the leaf's requires_grad flag and returns self: no data write, no version
    # bump, no grad_fn (the analysis special-cases it)
    "requires_grad_": (False, {}),
    "detach": (False, {}),
    "detach_": (False, {}),
    "resize_": (False, {}),
    "resize_as_": (False, {}),
    "_fw_primal": (True, {"self": []}),
    "_make_dual": (True, {"primal": []}),
}

# Composite ops (no formula of their own on dense tensors) that never give their
# result a grad_fn: bool/int results.
NONDIFF_COMPOSITE = {
    "isclose", "isreal", "isfinite", "is_nonzero", "one_hot", "argsort", "argwhere",
    "nonzero_numpy", "greater", "greater_equal", "less", "less_equal", "not_equal", "histogramdd",
    "result_type", "can_cast", "promote_types", "_shape_as_tensor", "data", "retain_grad",
    "set_data", "output_nr", "retains_grad", "_version", "is_leaf", "_backward", "_dim_arange",
}
NONDIFF_COMPOSITE_KEYS = {"where"}  # where(condition) == nonzero(condition, as_tuple=True)

# Composite alias ops: alias base name -> target base name (overload names are kept,
# in-place suffixes too; params map by position).
NATIVE_ALIASES = {
    "absolute": "abs", "arccos": "acos", "arccosh": "acosh", "arcsin": "asin",
    "arcsinh": "asinh", "arctan": "atan", "arctanh": "atanh", "arctan2": "atan2",
    "divide": "div", "true_divide": "div", "multiply": "mul", "subtract": "sub",
    "negative": "neg", "clip": "clamp", "fix": "trunc", "concat": "cat",
    "concatenate": "cat", "greater": "gt", "greater_equal": "ge", "less": "lt",
    "less_equal": "le", "not_equal": "ne", "swapaxes": "transpose",
    "swapdims": "transpose", "moveaxis": "movedim", "row_stack": "vstack",
    "special_expm1": "expm1", "special_exp2": "exp2", "special_psi": "digamma",
    "special_digamma": "digamma", "special_gammaln": "lgamma", "special_erf": "erf",
    "special_erfc": "erfc", "special_erfinv": "erfinv", "special_xlogy": "xlogy",
    "special_i0": "i0", "special_logit": "logit", "special_polygamma": "polygamma",
    "special_logsumexp": "logsumexp", "special_expit": "sigmoid", "special_sinc": "sinc",
    "special_round": "round", "special_log1p": "log1p", "special_gammainc": "igamma",
    "special_gammaincc": "igammac", "special_multigammaln": "mvlgamma", "ger": "outer",
    "det": "linalg_det", "inverse": "linalg_inv", "linalg_matmul": "matmul",
    "float_power": "pow", "max": "maximum", "min": "minimum", "relu6": "hardtanh",
    "selu": "elu", "pin_memory": "_pin_memory",
}
# aliases that only hold for some overloads: (alias key) -> target key
NATIVE_ALIAS_KEYS = {
    "max.other": "maximum", "min.other": "minimum",
    "float_power.Tensor_Tensor": "pow.Tensor_Tensor", "float_power.Scalar": "pow.Scalar",
    "float_power.Tensor_Scalar": "pow.Tensor_Scalar", "float_power_.Scalar": "pow_.Scalar",
    "float_power_.Tensor": "pow_.Tensor", "relu6": "hardtanh", "relu6_": "hardtanh_",
    "selu": "elu", "selu_": "elu_", "narrow": "slice.Tensor", "narrow.Tensor": "slice.Tensor",
    "split.sizes": "split_with_sizes", "std": "std.correction", "std.dim": "std.correction",
    "var": "var.correction", "var.dim": "var.correction", "std_mean": "std_mean.correction",
    "std_mean.dim": "std_mean.correction", "var_mean": "var_mean.correction",
    "var_mean.dim": "var_mean.correction", "linalg_inv": "linalg_inv_ex",
    "linalg_cholesky": "linalg_cholesky_ex", "linalg_solve": "_linalg_solve_ex",
    "linalg_solve_ex": "_linalg_solve_ex", "linalg_det": "_linalg_det",
    "linalg_slogdet": "_linalg_slogdet", "slogdet": "_linalg_slogdet",
    "linalg_eigh": "_linalg_eigh", "linalg_svd": "_linalg_svd", "cross": "linalg_cross",
    "special_softmax": "_softmax", "special_log_softmax": "_log_softmax",
    "log_sigmoid": "log_sigmoid_forward", "adaptive_avg_pool2d": "_adaptive_avg_pool2d",
    "adaptive_avg_pool3d": "_adaptive_avg_pool3d", "grid_sampler": "grid_sampler_2d",
    "fliplr": "flip", "flipud": "flip", "tile": "repeat", "sum_to_size": "sum",
    "resolve_conj": "clone", "resolve_neg": "clone", "contiguous": "clone",
    "upsample_linear1d.vec": "upsample_linear1d", "upsample_bilinear2d.vec": "upsample_bilinear2d",
    "upsample_trilinear3d.vec": "upsample_trilinear3d", "upsample_bicubic2d.vec": "upsample_bicubic2d",
    "upsample_nearest1d.vec": "upsample_nearest1d", "upsample_nearest2d.vec": "upsample_nearest2d",
    "upsample_nearest3d.vec": "upsample_nearest3d",
    "swapaxes": "transpose.int", "swapdims": "transpose.int", "swapaxes_": "transpose_",
    "swapdims_": "transpose_", "special_xlogy": "xlogy.Tensor", "special_xlogy.self_scalar": "xlogy.Scalar_Self",
    "special_xlogy.other_scalar": "xlogy.Scalar_Other", "linalg_norm": "linalg_vector_norm",
    "linalg_norm.ord_str": "linalg_vector_norm", "linalg_matrix_norm": "linalg_vector_norm",
    "linalg_matrix_norm.str_ord": "linalg_vector_norm", "frobenius_norm.dim": "linalg_vector_norm",
    "cdist": "_cdist_forward", "pdist": "_pdist_forward",
    "multilabel_margin_loss": "multilabel_margin_loss_forward",
}

A = None  # "map tensor params by name (input <-> self)" marker in step args

# What a CompositeImplicitAutograd op runs on dense CPU/CUDA tensors, as steps
# (target op key, {target param: source}).  A source is a param of the composite op
# or "%i" (output of step i); a param passed through a view (weight.t(),
# x.reshape(...)) is written as the param itself, because a saved view shares the
# version counter of its base.  The last step's outputs are the composite's outputs.
DECOMPOSITIONS = {
    "linear": [("addmm", {"self": "bias", "mat1": "input", "mat2": "weight"})],
    "matmul": [("mm", {"self": "self", "mat2": "other"})],
    "softmax.int": [("_softmax", {"self": "self"})],
    "log_softmax.int": [("_log_softmax", {"self": "self"})],
    "cross_entropy_loss": [("_log_softmax", {"self": "self"}),
                           ("nll_loss_forward", {"self": "%0", "target": "target", "weight": "weight"})],
    "nll_loss": [("nll_loss_forward", {"self": "self", "target": "target", "weight": "weight"})],
    "nll_loss_nd": [("nll_loss_forward", {"self": "self", "target": "target", "weight": "weight"})],
    "nll_loss2d": [("nll_loss2d_forward", {"self": "self", "target": "target", "weight": "weight"})],
    "dropout": [("native_dropout", {"input": "input"})],
    "dropout_": [("mul_.Tensor", {"self": "self"})],
    "feature_dropout": [("mul.Tensor", {"self": "input"})],
    "feature_dropout_": [("mul_.Tensor", {"self": "self"})],
    "alpha_dropout": [("mul.Tensor", {"self": "input"}), ("add.Tensor", {"self": "%0"})],
    "alpha_dropout_": [("mul_.Tensor", {"self": "self"}), ("add_.Tensor", {"self": "%0"})],
    "feature_alpha_dropout": [("mul.Tensor", {"self": "input"}), ("add.Tensor", {"self": "%0"})],
    "feature_alpha_dropout_": [("mul_.Tensor", {"self": "self"}), ("add_.Tensor", {"self": "%0"})],
    "layer_norm": [("native_layer_norm", {"input": "input", "weight": "weight", "bias": "bias"})],
    "batch_norm": [("native_batch_norm", {"input": "input", "weight": "weight", "bias": "bias",
                                          "running_mean": "running_mean", "running_var": "running_var"})],
    # runs batch_norm on a reshaped input with running stats/weight *repeated* (copies)
    "instance_norm": [("native_batch_norm", {"input": "input"})],
    "group_norm": [("native_group_norm", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv1d": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv2d": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv3d": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv1d.padding": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv2d.padding": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv3d.padding": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv_transpose1d": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv_transpose2d.input": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "conv_transpose3d.input": [("convolution", {"input": "input", "weight": "weight", "bias": "bias"})],
    "max_pool1d": [("max_pool2d_with_indices", {"self": "self"})],
    "max_pool2d": [("max_pool2d_with_indices", {"self": "self"})],
    "max_pool3d": [("max_pool3d_with_indices", {"self": "self"})],
    "max_pool1d_with_indices": [("max_pool2d_with_indices", {"self": "self"})],
    "avg_pool1d": [("avg_pool2d", {"self": "self"})],
    "adaptive_avg_pool1d": [("_adaptive_avg_pool2d", {"self": "self"})],
    "adaptive_max_pool1d": [("adaptive_max_pool2d", {"self": "self"})],
    "flatten.using_ints": [("view", {"self": "self"})],
    "unflatten.int": [("view", {"self": "self"})],
    "reshape": [("view", {"self": "self"})],
    "reshape_as": [("view", {"self": "self"})],
    "view_as": [("view", {"self": "self"})],
    "ravel": [("view", {"self": "self"})],
    "expand_as": [("expand", {"self": "self"})],
    "broadcast_to": [("expand", {"self": "self"})],
    "movedim.intlist": [("permute", {"self": "self"})],
    "movedim.int": [("permute", {"self": "self"})],
    "numpy_T": [("permute", {"self": "self"})],
    "mT": [("transpose.int", {"self": "self"})],
    "mH": [("transpose.int", {"self": "self"})],
    "matrix_H": [("transpose.int", {"self": "self"})],
    "adjoint": [("transpose.int", {"self": "self"})],
    "positive": [("alias", {"self": "self"})],
    "type_as": [("_to_copy", {"self": "self"})],
    "to.dtype_layout": [("_to_copy", {"self": "self"})],
    "to.device": [("_to_copy", {"self": "self"})],
    "to.dtype": [("_to_copy", {"self": "self"})],
    "to.other": [("_to_copy", {"self": "self"})],
    "square": [("pow.Tensor_Scalar", {"self": "self"})],
    "square_": [("pow_.Scalar", {"self": "self"})],
    "where.ScalarSelf": [("where.self", {"condition": "condition", "other": "other"})],
    "where.ScalarOther": [("where.self", {"condition": "condition", "self": "self"})],
    "where.Scalar": [("where.self", {"condition": "condition"})],
    "nanmean": [("nansum", {"self": "self"}), ("div.Tensor", {"self": "%0"})],
    "hstack": [("cat", {"tensors": "tensors"})],
    "vstack": [("cat", {"tensors": "tensors"})],
    "dstack": [("cat", {"tensors": "tensors"})],
    "column_stack": [("cat", {"tensors": "tensors"})],
    "msort": [("sort", {"self": "self"})],
    "take_along_dim": [("gather", {"self": "self", "index": "indices"})],
    "repeat_interleave.self_int": [("index_select", {"self": "self"})],
    "repeat_interleave.self_Tensor": [("index_select", {"self": "self"})],
    "diag": [("diagonal", {"self": "self"}), ("clone", {"self": "%0"})],
    "diff": [("sub.Tensor", {"self": "self", "other": "self"})],
    "outer": [("mul.Tensor", {"self": "self", "other": "vec2"})],
    "inner": [("mm", {"self": "self", "mat2": "other"})],
    "tensordot": [("mm", {"self": "self", "mat2": "other"})],
    "l1_loss": [("sub.Tensor", {"self": "self", "other": "target"}), ("abs", {"self": "%0"}),
                ("mean", {"self": "%1"})],
    "kl_div": ("any_of", [  # log_target=False | True
        [("xlogy.Tensor", {"self": "target", "other": "target"}), ("mul.Tensor", {"self": "target", "other": "self"}),
         ("sub.Tensor", {"self": "%0", "other": "%1"}), ("mean", {"self": "%2"})],
        [("exp", {"self": "target"}), ("sub.Tensor", {"self": "target", "other": "self"}),
         ("mul.Tensor", {"self": "%0", "other": "%1"}), ("mean", {"self": "%2"})]]),
    "pairwise_distance": [("sub.Tensor", {"self": "x1", "other": "x2"}), ("add.Scalar", {"self": "%0"}),
                          ("linalg_vector_norm", {"self": "%1"})],
    "bilinear": [("_trilinear", {"i1": "input1", "i2": "weight", "i3": "input2"}),
                 ("add.Tensor", {"self": "%0", "other": "bias"})],
    "prelu": [("_prelu_kernel", {"self": "self", "weight": "weight"})],
    "pad": [("constant_pad_nd", {"self": "self"})],
    # CPU runs the math; CUDA the fused kernel: the union of both is recorded.
    "rms_norm": ("any_of", [
        [("pow.Tensor_Scalar", {"self": "input"}), ("mean.dim", {"self": "%0"}), ("add.Scalar", {"self": "%1"}),
         ("rsqrt", {"self": "%2"}), ("mul.Tensor", {"self": "input", "other": "%3"}),
         ("mul.Tensor", {"self": "%4", "other": "weight"})],
        [("_fused_rms_norm", {"input": "input", "weight": "weight"})]]),
    "cosine_similarity": [("linalg_vector_norm", {"self": "x1"}), ("linalg_vector_norm", {"self": "x2"}),
                          ("div.Tensor", {"self": "x1", "other": "%0"}), ("div.Tensor", {"self": "x2", "other": "%1"}),
                          ("mul.Tensor", {"self": "%2", "other": "%3"}), ("sum.dim_IntList", {"self": "%4"})],
    # CPU: math (scaled copies of q and k, softmax, bmm with value); CUDA: flash /
    # efficient kernels that save q, k, v and the output.  Union.
    "scaled_dot_product_attention": ("any_of", [
        [("mul.Scalar", {"self": "query"}), ("mul.Scalar", {"self": "key"}),
         ("matmul", {"self": "%0", "other": "%1"}), ("add.Tensor", {"self": "%2", "other": "attn_mask"}),
         ("_softmax", {"self": "%3"}), ("matmul", {"self": "%4", "other": "value"})],
        [("_scaled_dot_product_flash_attention", {"query": "query", "key": "key", "value": "value"})],
        [("_scaled_dot_product_efficient_attention", {"query": "query", "key": "key", "value": "value",
                                                       "attn_bias": "attn_mask"})]]),
    "svd": [("_linalg_svd", {"A": "self"})],
    "logdet": [("_linalg_slogdet", {"A": "self"})],
    "linalg_eigvalsh": [("_linalg_eigh", {"A": "self"})],
    "linalg_svdvals": [("_linalg_svd", {"A": "A"})],
    # real input -> _fft_r2c (saves self), complex input -> _fft_c2c: union
    **{f"fft_{k}": ("any_of", [[("_fft_r2c", {"self": "self"})], [("_fft_c2c", {"self": "self"})]])
       for k in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn")},
    **{f"fft_{k}": [("_fft_r2c", {"self": "self"})] for k in ("rfft", "rfft2", "rfftn")},
    **{f"fft_{k}": [("_fft_c2r", {"self": "self"})] for k in ("irfft", "irfft2", "irfftn")},
    "fft_fftshift": [("roll", {"self": "self"})],
    # views / copies that save nothing
    **{k: [("split.Tensor", {"self": "self"})] for k in (
        "chunk", "unsafe_chunk", "hsplit.int", "hsplit.array", "vsplit.int", "vsplit.array", "dsplit.int",
        "dsplit.array", "tensor_split.sections", "tensor_split.indices", "tensor_split.tensor_indices_or_sections")},
    **{k: [("view", {"self": "self"})] for k in ("atleast_1d", "atleast_2d", "atleast_3d")},
    **{k: [("expand", {"self": "tensors"})] for k in (
        "atleast_1d.Sequence", "atleast_2d.Sequence", "atleast_3d.Sequence", "broadcast_tensors", "meshgrid",
        "meshgrid.indexing")},
    "real": [("view_as_real", {"self": "self"})],
    "imag": [("view_as_real", {"self": "self"})],
    "conj": [("_conj", {"self": "self"})],
    "conj_physical": [("_conj_physical", {"self": "self"})],
    "chalf": [("_to_copy", {"self": "self"})],
    "fft_ifftshift": [("roll", {"self": "self"})],
}

# torch.nn.functional Python functions: name -> steps (A = map by name, input <-> self).
# "inplace" entries give the steps when the function's `inplace` argument is True.
FUNCTIONAL = {
    "relu": {"steps": [("relu", A)], "inplace": [("relu_", A)]},
    "relu6": {"steps": [("relu6", A)], "inplace": [("relu6_", A)]},
    "leaky_relu": {"steps": [("leaky_relu", A)], "inplace": [("leaky_relu_", A)]},
    "elu": {"steps": [("elu", A)], "inplace": [("elu_", A)]},
    "selu": {"steps": [("selu", A)], "inplace": [("selu_", A)]},
    "celu": {"steps": [("celu", A)], "inplace": [("celu_", A)]},
    "silu": {"steps": [("silu", A)], "inplace": [("silu_", A)]},
    "mish": {"steps": [("mish", A)], "inplace": [("mish_", A)]},
    "hardswish": {"steps": [("hardswish", A)], "inplace": [("hardswish_", A)]},
    "hardsigmoid": {"steps": [("hardsigmoid", A)], "inplace": [("hardsigmoid_", A)]},
    "hardtanh": {"steps": [("hardtanh", A)], "inplace": [("hardtanh_", A)]},
    "threshold": {"steps": [("threshold", A)], "inplace": [("threshold_", A)]},
    "rrelu": {"steps": [("rrelu", A)], "inplace": [("rrelu_", A)]},
    "dropout": {"steps": [("dropout", A)], "inplace": [("dropout_", A)]},
    "dropout1d": {"steps": [("feature_dropout", A)], "inplace": [("feature_dropout_", A)]},
    "dropout2d": {"steps": [("feature_dropout", A)], "inplace": [("feature_dropout_", A)]},
    "dropout3d": {"steps": [("feature_dropout", A)], "inplace": [("feature_dropout_", A)]},
    "alpha_dropout": {"steps": [("alpha_dropout", A)], "inplace": [("alpha_dropout_", A)]},
    "feature_alpha_dropout": {"steps": [("feature_alpha_dropout", A)],
                              "inplace": [("feature_alpha_dropout_", A)]},
    "sigmoid": {"steps": [("sigmoid", A)]},
    "tanh": {"steps": [("tanh", A)]},
    "softsign": {"steps": [("abs", {"self": "input"}), ("add.Scalar", {"self": "%0"}),
                           ("div.Tensor", {"self": "input", "other": "%1"})]},
    "tanhshrink": {"steps": [("tanh", {"self": "input"}), ("sub.Tensor", {"self": "input", "other": "%0"})]},
    "glu": {"steps": [("glu", A)]},
    "softmax": {"steps": [("softmax.int", A)]},
    "log_softmax": {"steps": [("log_softmax.int", A)]},
    "softmin": {"steps": [("neg", {"self": "input"}), ("softmax.int", {"self": "%0"})]},
    "normalize": {"steps": [("linalg_vector_norm", {"self": "input"}), ("clamp_min", {"self": "%0"}),
                            ("div.Tensor", {"self": "input", "other": "%1"})]},
    "embedding": {"steps": [("embedding", {"weight": "weight", "indices": "input"})]},
    "layer_norm": {"steps": [("layer_norm", A)]},
    "rms_norm": {"steps": [("rms_norm", A)]},
    "group_norm": {"steps": [("group_norm", A)]},
    "batch_norm": {"steps": [("batch_norm", A)]},
    "instance_norm": {"steps": [("instance_norm", A)]},
    "max_pool1d": {"steps": [("max_pool1d", A)]},
    "max_pool2d": {"steps": [("max_pool2d", A)]},
    "max_pool3d": {"steps": [("max_pool3d", A)]},
    "max_pool1d_with_indices": {"steps": [("max_pool1d_with_indices", A)]},
    "max_pool2d_with_indices": {"steps": [("max_pool2d_with_indices", A)]},
    "max_pool3d_with_indices": {"steps": [("max_pool3d_with_indices", A)]},
    "adaptive_avg_pool2d": {"steps": [("adaptive_avg_pool2d", A)]},
    "adaptive_avg_pool3d": {"steps": [("adaptive_avg_pool3d", A)]},
    "adaptive_max_pool1d": {"steps": [("adaptive_max_pool1d", A)]},
    "adaptive_max_pool2d": {"steps": [("adaptive_max_pool2d", A)]},
    "adaptive_max_pool3d": {"steps": [("adaptive_max_pool3d", A)]},
    # nearest/linear/bilinear/bicubic kernels save nothing; mode="area" (adaptive_avg_pool,
    # saves input) is not modelled
    "interpolate": {"steps": [("upsample_nearest2d", A)]},
    "upsample": {"steps": [("upsample_nearest2d", A)]},
    "upsample_nearest": {"steps": [("upsample_nearest2d", A)]},
    "upsample_bilinear": {"steps": [("upsample_bilinear2d", A)]},
    "pad": {"steps": [("pad", A)]},
    "grid_sample": {"steps": [("grid_sampler", A)]},
    "affine_grid": {"steps": [("affine_grid_generator", A)]},
    "unfold": {"steps": [("im2col", A)]},
    "fold": {"steps": [("col2im", A)]},
    "mse_loss": {"steps": [("mse_loss", A)]},
    "l1_loss": {"steps": [("l1_loss", A)]},
    "smooth_l1_loss": {"steps": [("smooth_l1_loss", A)]},
    "huber_loss": {"steps": [("huber_loss", A)]},
    "binary_cross_entropy": {"steps": [("binary_cross_entropy", A)]},
    "binary_cross_entropy_with_logits": {"steps": [("binary_cross_entropy_with_logits", A)]},
    "nll_loss": {"steps": [("nll_loss_nd", A)]},
    "cross_entropy": {"steps": [("cross_entropy_loss", A)]},
    "kl_div": {"steps": [("kl_div", A)]},
    "soft_margin_loss": {"steps": [("soft_margin_loss", A)]},
    "multi_margin_loss": {"steps": [("multi_margin_loss", A)]},
    "multilabel_margin_loss": {"steps": [("multilabel_margin_loss", A)]},
    "margin_ranking_loss": {"steps": [("margin_ranking_loss", A)]},
    "hinge_embedding_loss": {"steps": [("hinge_embedding_loss", A)]},
    "cosine_embedding_loss": {"steps": [("cosine_embedding_loss", A)]},
    "triplet_margin_loss": {"steps": [("triplet_margin_loss", A)]},
    "ctc_loss": {"steps": [("ctc_loss.Tensor", A)]},
    "adaptive_max_pool1d_with_indices": {"steps": [("adaptive_max_pool1d", A)]},
    "adaptive_max_pool2d_with_indices": {"steps": [("adaptive_max_pool2d", A)]},
    "adaptive_max_pool3d_with_indices": {"steps": [("adaptive_max_pool3d", A)]},
    "fractional_max_pool2d": {"steps": [("fractional_max_pool2d", {"self": "input"})]},
    "fractional_max_pool3d": {"steps": [("fractional_max_pool3d", {"self": "input"})]},
    "fractional_max_pool2d_with_indices": {"steps": [("fractional_max_pool2d", {"self": "input"})]},
    "fractional_max_pool3d_with_indices": {"steps": [("fractional_max_pool3d", {"self": "input"})]},
    "max_unpool1d": {"steps": [("max_unpool2d", A)]},
    "max_unpool2d": {"steps": [("max_unpool2d", A)]},
    "max_unpool3d": {"steps": [("max_unpool3d", A)]},
}

# Python-level Tensor methods and operator dunders that are not ATen ops (or bind a
# different param to the receiver).  Same fields as an op entry plus "steps".
PY_OPS = [
    {"name": "__getitem__", "overload": "view", "params": ["self", "indices"], "kinds": "TI",
     "returns": "T", "view": True, "steps": [("select.int", {"self": "self"})]},
    {"name": "__getitem__", "overload": "Tensor", "params": ["self", "indices"], "kinds": "TT",
     "returns": "T", "steps": [("index.Tensor", {"self": "self", "indices": "indices"})]},
    {"name": "__setitem__", "overload": "view", "params": ["self", "indices", "value"], "kinds": "TIt",
     "returns": "", "inplace": True,
     "steps": [("select.int", {"self": "self"}), ("copy_", {"self": "%0", "src": "value"})]},
    {"name": "__setitem__", "overload": "Tensor", "params": ["self", "indices", "value"], "kinds": "TTt",
     "returns": "", "inplace": True,
     "steps": [("index_put_", {"self": "self", "indices": "indices", "values": "value"})]},
    {"name": "__rtruediv__", "overload": "", "params": ["self", "other"], "kinds": "TN", "returns": "T", "tags": ["pointwise"],
     "steps": [("reciprocal", {"self": "self"}), ("mul.Scalar", {"self": "%0"})]},
    {"name": "__rdiv__", "overload": "", "params": ["self", "other"], "kinds": "TN", "returns": "T", "tags": ["pointwise"],
     "steps": [("reciprocal", {"self": "self"}), ("mul.Scalar", {"self": "%0"})]},
    {"name": "__rpow__", "overload": "", "params": ["self", "other"], "kinds": "TN", "returns": "T", "tags": ["pointwise"],
     "steps": [("pow.Scalar", {"exponent": "self"})]},
    {"name": "__rmatmul__", "overload": "", "params": ["self", "other"], "kinds": "TT", "returns": "T",
     "steps": [("matmul", {"self": "other", "other": "self"})]},
]
# Integer/bool casts (Tensor.long() ...): the result never requires grad.
for _cast in ("long", "int", "short", "byte", "char", "bool"):
    PY_OPS.append({"name": _cast, "overload": "", "params": ["self"], "kinds": "T", "returns": "T",
                   "view": True, "steps": None, "diff": False})

# Names with no entry of their own that mean another op (operator dunders,
# Tensor methods bound in C++, torch.nn.functional builtins with another name).
NAME_ALIASES = {
    "__add__": "add", "__radd__": "add", "__iadd__": "add_", "__sub__": "sub",
    "__isub__": "sub_", "__rsub__": "rsub", "__mul__": "mul", "__rmul__": "mul",
    "__imul__": "mul_", "__truediv__": "div", "__div__": "div", "__itruediv__": "div_",
    "__idiv__": "div_", "__floordiv__": "floor_divide", "__ifloordiv__": "floor_divide_",
    "__mod__": "remainder", "__imod__": "remainder_", "__pow__": "pow", "__ipow__": "pow_",
    "__matmul__": "matmul", "__neg__": "neg", "__abs__": "abs", "__pos__": "positive",
    "__invert__": "bitwise_not", "__eq__": "eq", "__ne__": "ne", "__lt__": "lt",
    "__le__": "le", "__gt__": "gt", "__ge__": "ge", "__rand__": "bitwise_and",
    "__ror__": "bitwise_or", "__rxor__": "bitwise_xor", "__iter__": "unbind",
    "T": "numpy_T", "H": "adjoint", "float": "to", "double": "to", "half": "to",
    "bfloat16": "to", "cfloat": "to", "cdouble": "to", "cpu": "to", "cuda": "to",
    "type": "to", "logsigmoid": "log_sigmoid",
}


# --------------------------------------------------------------------------- torchgen

def _torchgen_paths():
    import torchgen
    base = os.path.dirname(torchgen.__file__)
    return (os.path.join(base, "packaged", "autograd", "derivatives.yaml"),
            os.path.join(base, "packaged", "ATen", "native", "native_functions.yaml"),
            os.path.join(base, "packaged", "ATen", "native", "tags.yaml"))


def load_native():
    """NativeFunctionWithDifferentiabilityInfo for every schema, as gen_autograd does."""
    from torchgen.api.autograd import match_differentiability_info
    from torchgen.gen import parse_native_yaml
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    derivatives, native, tags = _torchgen_paths()
    # torchgen builds ~7000 distinct regexes while loading derivatives.yaml; the stdlib
    # cache holds 512, so most get compiled twice.  A bigger cache saves ~15%.
    saved_cache = getattr(re, "_MAXCACHE", None)
    if saved_cache is not None:
        re._MAXCACHE = max(saved_cache, 16384)
    try:
        infos, _ = load_derivatives(derivatives, native, tags)
        funcs = parse_native_yaml(native, tags).native_functions
        return match_differentiability_info(funcs, infos)
    finally:
        if saved_cache is not None:
            re._MAXCACHE = saved_cache


def type_kind(t) -> str:
    from torchgen.model import BaseType, ListType, OptionalType
    if isinstance(t, OptionalType):
        k = type_kind(t.elem)
        return "t" if k == "T" else k
    if isinstance(t, ListType):
        if t.elem.is_tensor_like():
            return "L"
        if isinstance(t.elem, BaseType) and t.elem.name.name in NUMBER_TYPES:
            return "I"
        return "O"
    if isinstance(t, BaseType):
        n = t.name.name
        if n == "Tensor":
            return "T"
        if n in NUMBER_TYPES:
            return "N"
        if n == "str":
            return "S"
    return "O"


def _is_saved_tensor_type(ctype) -> bool:
    """The C++ types the autograd codegen stores as SavedVariable(s) (save_variables)."""
    from torchgen.api.types import (BaseCType, ListCType, MutRefCType, OptionalCType,
                                    VectorCType, iTensorListRefT, tensorListT, tensorT)
    return ctype in (BaseCType(tensorT), OptionalCType(BaseCType(tensorT)),
                     MutRefCType(OptionalCType(BaseCType(tensorT))), BaseCType(tensorListT),
                     ListCType(OptionalCType(BaseCType(tensorT))), BaseCType(iTensorListRefT),
                     VectorCType(BaseCType(tensorT)))


def _guard(info, sa, args_wd):
    """Mirror of gen_variable_type's guard_for: the inputs whose grad being needed
    makes this saved input be saved, or None when it is saved whenever the node is."""
    from torchgen.api.types import BaseCType, tensorT
    from torchgen.packaged.autograd.gen_inplace_or_view_type import is_tensor_list_type
    if any(is_tensor_list_type(getattr(b.argument, "argument", b.argument).type)
           for b in info.args_with_derivatives):
        return None
    if "backward" in info.name or len(args_wd) <= 1 or sa.nctype.type != BaseCType(tensorT):
        return None
    used_in = [d for d in info.derivatives if sa in d.saved_inputs]
    if len(used_in) != 1:
        return None
    d = used_in[0]
    if len(d.var_names) != 1:
        m = re.search(r"wrap_opt_if\(%s,(.*?)\)" % re.escape(str(sa.nctype.name)), d.formula)
        if m is None:
            return None
        return {args_wd[int(i)] for i in re.findall(r"grad_input_mask\[(\d+)\]", m.group(1))}
    return {d.var_names[0]}


def native_entry(fn):
    """One op entry from torchgen's data, or None for schemas we do not ship."""
    from torchgen.api import cpp
    from torchgen.api.autograd import gen_differentiable_outputs, is_differentiable
    from torchgen.model import SchemaKind
    from torchgen.packaged.autograd.gen_inplace_or_view_type import RETURNS_VIEWS_OF_INPUT
    from torchgen.packaged.autograd.gen_variable_type import DONT_REQUIRE_DERIVATIVE

    from torchgen.packaged.autograd.gen_python_functions import SKIP_PYTHON_BINDINGS_SIGNATURES

    f = fn.func
    schema = f.func
    kind = schema.kind()
    if kind not in (SchemaKind.functional, SchemaKind.inplace):
        return None  # out= variants and "mutable" internals

    args = schema.arguments
    positional = list(args.flat_positional)
    params = positional + list(args.flat_kwarg_only)
    names = [a.name for a in params]
    kinds = "".join(type_kind(a.type) for a in params)
    tensor_params = [a.name for a in params if a.type.is_tensor_like()]
    returns = "".join(type_kind(r.type).upper() if type_kind(r.type) in "Tt" else type_kind(r.type)
                      for r in schema.returns)
    name = str(schema.name.name)
    base = schema.name.name.base
    inplace = kind == SchemaKind.inplace
    self_arg = args.self_arg.argument if args.self_arg is not None else None
    view = False
    if not inplace and self_arg is not None and self_arg.annotation is not None:
        sa = self_arg.annotation
        view = any(r.annotation is not None and not r.annotation.is_write
                   and set(r.annotation.alias_set) & set(sa.alias_set) for r in schema.returns)
    if not inplace and base in RETURNS_VIEWS_OF_INPUT and returns:
        view = True
    entry = {
        "name": name, "overload": schema.name.overload_name, "ns": "aten",
        "params": names, "kinds": kinds, "npos": len(positional),
        "nreq": sum(1 for a in positional if a.default is None), "returns": returns,
        "kwreq": [a.name for a in args.flat_kwarg_only if a.default is None],
        "variants": ("f" if any(v.name == "function" for v in f.variants) else "")
                    + ("m" if any(v.name == "method" for v in f.variants) else ""),
    }
    shape_tags = sorted({"pointwise", "reduction"} & {str(t) for t in f.tags})
    if shape_tags:
        entry["tags"] = shape_tags  # how the result's shape follows the inputs': broadcast, or reduced
    if len(schema.returns) > 1 and all(r.name for r in schema.returns):
        entry["fields"] = [r.name for r in schema.returns]  # a named tuple: `x.max(1).values`
    if f.python_module:
        entry["module"] = f.python_module
    if str(schema) in SKIP_PYTHON_BINDINGS_SIGNATURES:
        entry["hidden"] = True  # no Python binding: `x * 2` wraps the 2 and runs mul.Tensor, which saves it
    if view:
        entry["view"] = True
    if inplace:
        entry["inplace"] = True

    info = fn.info.get("Default") if fn.info else None
    has_tensor_out = any(c in "TL" for c in returns)
    nondiff_name = base in DONT_REQUIRE_DERIVATIVE or name in DONT_REQUIRE_DERIVATIVE

    if name in ("requires_grad_", "detach_"):
        # change autograd metadata of self and return it: no data write, no version bump
        entry.pop("inplace", None)
        entry.update(view=True, diff=False, saves={}, via="manual")
        return entry
    if f.has_composite_implicit_autograd_kernel:
        # Dense tensors run the decomposition; derivatives.yaml entries of such ops
        # only serve other dispatch keys (nested, mkldnn, ...).
        entry["_composite"] = True
        has_formula = info is not None and info.has_derivatives
        entry["_formula"] = _formula_saves(fn, info, inplace, names) if has_formula else None
        entry["_tensor_params"] = tensor_params
        return entry

    if name in MANUAL:
        diff, saves = MANUAL[name]
        entry.update(diff=diff, saves=saves, via="manual" if diff else "none")
        return entry

    diff_inputs = [a.name for a in args.flat_non_out
                   if hasattr(a, "type") and is_differentiable(a.name, a.type, info)]
    diff_outputs = gen_differentiable_outputs(fn) if has_tensor_out else []
    ret_names = list(cpp.return_names(f))
    if info is not None and info.has_derivatives:
        args_wd = [b.name for b in info.args_with_derivatives]
        diff = bool(args_wd) and bool(diff_outputs) and not nondiff_name
        entry["diff"] = diff
        if diff:
            entry["saves"] = _formula_saves(fn, info, inplace, names)
            entry["via"] = "formula"
            if any("not_implemented" in d.original_formula for d in info.derivatives):
                entry["notimpl"] = True
        else:
            entry["via"] = "none"
    else:
        diff = bool(diff_inputs) and bool(diff_outputs) and not nondiff_name
        entry["diff"] = diff
        if diff:  # AutogradNotImplemented kernel: a grad_fn that raises in backward
            entry["saves"] = {n: [] for n in tensor_params}
            entry["via"] = "not-implemented"
            entry["notimpl"] = True
        else:
            entry["via"] = "none"
    if diff and diff_outputs and len(diff_outputs) != sum(1 for c in returns if c in "TL"):
        entry["diff_out"] = sorted(ret_names.index(o.name) for o in diff_outputs)
    return entry


def _formula_saves(fn, info, inplace, names):
    from torchgen.api import cpp
    ret_names = [n if n != "self" else "result" for n in cpp.return_names(fn.func)]
    args_wd = [b.name for b in info.args_with_derivatives]
    saves = {a: set() for a in args_wd}
    for d in info.derivatives:
        for sa in d.saved_inputs:
            if not _is_saved_tensor_type(sa.nctype.type):
                continue
            pname = str(getattr(sa.nctype.name, "name", sa.nctype.name))
            if pname not in names or (inplace and pname == "self"):
                continue
            guard = _guard(info, sa, args_wd)
            for a in (args_wd if guard is None else guard):
                saves[a].add(pname)
        for sa in d.saved_outputs:
            if not _is_saved_tensor_type(sa.nctype.type):
                continue
            oname = str(getattr(sa.nctype.name, "name", sa.nctype.name))
            idx = ret_names.index(oname) if oname in ret_names else 0
            for a in args_wd:
                saves[a].add("result" if idx == 0 else f"result{idx}")
    return {a: sorted(s) for a, s in saves.items()}


# --------------------------------------------------------------------------- composites

def op_key(e):
    return e["name"] + ("." + e["overload"] if e["overload"] else "")


class Composer:
    """Computes saves/differentiability of composite ops from their steps."""

    def __init__(self, entries):
        self.entries = entries  # key -> entry (aten)
        self.busy = set()

    def get(self, key):
        e = self.entries.get(key)
        if e is None:
            raise KeyError(f"decomposition target {key!r} is not an op")
        if e.get("_composite"):
            self.finish_native(key)
        return e

    def finish_native(self, key):
        e = self.entries[key]
        if not e.get("_composite") or key in self.busy:
            return
        self.busy.add(key)
        steps = self.native_steps(e)
        formula = e.pop("_formula")
        tparams = e.pop("_tensor_params")
        has_tensor_out = any(c in "TL" for c in e["returns"])
        base = e["name"][:-1] if e["name"].endswith("_") and not e["name"].endswith("__") else e["name"]
        from torchgen.packaged.autograd.gen_variable_type import DONT_REQUIRE_DERIVATIVE
        if (not has_tensor_out or not tparams or key in NONDIFF_COMPOSITE_KEYS
                or e["name"] in NONDIFF_COMPOSITE
                or e["name"] in DONT_REQUIRE_DERIVATIVE or base in DONT_REQUIRE_DERIVATIVE):
            e.update(diff=False, via="none")
        elif steps is not None:
            how, steps = steps
            self.apply_any(e, steps, how)
        elif formula is not None:
            e.update(diff=True, saves=formula, via="formula-proxy")
        else:
            e.update(diff=True, saves={p: list(tparams) for p in tparams}, via="conservative")
        del e["_composite"]
        self.busy.discard(key)

    def native_steps(self, e):
        key = op_key(e)
        if key in DECOMPOSITIONS:
            return "decomposition", DECOMPOSITIONS[key]
        if key in NATIVE_ALIAS_KEYS:
            return "alias", [(NATIVE_ALIAS_KEYS[key], "POS")]
        base = e["name"]
        suffix = ""
        if base.endswith("_") and not base.endswith("__"):
            base, suffix = base[:-1], "_"
        if base in NATIVE_ALIASES:
            target = NATIVE_ALIASES[base] + suffix
            for cand in (target + ("." + e["overload"] if e["overload"] else ""), target):
                if cand in self.entries and cand != key:
                    return "alias", [(cand, "POS")]
        return None

    def apply_any(self, e, steps, how):
        """steps, or ("any_of", [steps, ...]): the union over the alternatives."""
        if not (isinstance(steps, tuple) and steps and steps[0] == "any_of"):
            return self.apply(e, steps, how)
        saves, targets = {}, []
        for alt in steps[1]:
            self.apply(e, alt, how)
            for p, s in e.get("saves", {}).items():
                saves[p] = sorted(set(saves.get(p, [])) | set(s))
            targets += [t for t in e["decomposes_to"] if t not in targets]
        e.pop("saves", None)
        e["diff"] = bool(saves)
        if saves:
            e["saves"] = saves
        e["via"] = how if saves else "none"
        e["decomposes_to"] = targets

    def apply(self, e, steps, how):
        params = e["params"]
        tparams = [p for p, k in zip(params, e["kinds"]) if k in "TtL"]
        resolved = []
        for tkey, args in steps:
            t = self.get(tkey)
            if args == "POS":
                args = {tp: sp for tp, sp, k in zip(t["params"], params, t["kinds"]) if k in "TtL"}
            elif args is A:
                args = {}
                for tp, k in zip(t["params"], t["kinds"]):
                    if k not in "TtL":
                        continue
                    if tp in params:
                        args[tp] = tp
                    elif tp == "self" and "input" in params:
                        args[tp] = "input"
                    elif tp == "input" and "self" in params:
                        args[tp] = "self"
            for tp, src in args.items():
                ok_src = src in params or (src.startswith("%") and int(src[1:]) < len(resolved))
                if tp not in t["params"] or not ok_src:
                    raise ValueError(f"bad step for {op_key(e)}: {op_key(t)} {tp} <- {src}")
            resolved.append((t, args))
        saves = {}
        n_ret = len(e["returns"]) if e["returns"] != "L" else 1
        last = len(resolved) - 1
        for p in tparams:
            live, saved = {p}, set()
            for i, (t, args) in enumerate(resolved):
                live_in = [tp for tp, src in args.items() if src in live and tp in t.get("saves", {})]
                if not live_in:
                    continue
                if t.get("diff"):
                    live.add(f"%{i}")
                for tp in live_in:
                    for s in t["saves"][tp]:
                        if s.startswith("result"):
                            idx = int(s[6:] or 0)
                            if i == last and idx < n_ret:
                                saved.add(s)
                        else:
                            src = args.get(s)
                            if src is not None and not src.startswith("%"):
                                saved.add(src)
            if f"%{last}" in live:
                saves[p] = sorted(saved)
        e["diff"] = bool(saves)
        if saves:
            e["saves"] = saves
        e["via"] = how if saves else "none"
        e["decomposes_to"] = [op_key(t) for t, _ in resolved]


# --------------------------------------------------------------------------- functional

def _annotation_kind(param) -> str:
    ann = param.annotation
    text = ann if isinstance(ann, str) else getattr(ann, "__name__", None) or repr(ann)
    text = str(text)
    if ann is inspect.Parameter.empty:
        if param.name in ("input", "target", "weight", "bias", "x1", "x2", "anchor", "positive",
                          "negative", "log_probs", "targets", "logits"):
            return "T"
        return "O"
    optional = "None" in text or "Optional" in text
    if "Callable" in text:
        return "O"
    if "Tensor" in text and ("list" in text.lower() or "Sequence" in text or "tuple" in text.lower()):
        return "L" if "int" not in text and "float" not in text else ("t" if optional else "T")
    if "Tensor" in text:
        return "t" if optional else "T"
    if text in ("int", "float", "bool", "<class 'int'>", "<class 'float'>", "<class 'bool'>") \
            or re.fullmatch(r"(int|float|bool)( \| None)?|Optional\[(int|float|bool)\]", text):
        return "N"
    if "list" in text.lower() or "tuple" in text.lower() or "BroadcastingList" in text:
        return "I"
    if text in ("str", "<class 'str'>") or re.fullmatch(r"str( \| None)?|Optional\[str\]", text):
        return "S"
    return "O"


def _functional_signature(F, name):
    fn = getattr(F, name)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    ps = list(sig.parameters.values())
    if ps and ps[0].kind == inspect.Parameter.VAR_POSITIONAL:
        for alt in ("_" + name, name + "_with_indices"):
            if hasattr(F, alt):
                return _functional_signature(F, alt)
        return None
    return ps


def functional_entries(composer):
    import torch.nn.functional as F
    out = []
    builtin_aliases = {}
    for name in sorted(getattr(F, "__all__", None) or dir(F)):
        if name.startswith("_"):
            continue
        obj = getattr(F, name, None)
        if obj is None or inspect.ismodule(obj) or isinstance(obj, type) or not callable(obj):
            continue
        ps = _functional_signature(F, name)
        if ps is None:
            native = getattr(obj, "__name__", name)
            if native != name:
                builtin_aliases[name] = native
            continue
        if getattr(obj, "__module__", "") not in ("torch.nn.functional", "torch._jit_internal") \
                and name not in FUNCTIONAL:
            continue
        params = [p for p in ps if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                               inspect.Parameter.KEYWORD_ONLY,
                                               inspect.Parameter.POSITIONAL_ONLY)]
        npos = sum(1 for p in params if p.kind != inspect.Parameter.KEYWORD_ONLY)
        kinds = "".join(_annotation_kind(p) for p in params)
        if "T" not in kinds and "t" not in kinds and "L" not in kinds:
            continue  # helpers (assert_int_or_pair, boolean_dispatch, ...)
        names = [p.name for p in params]
        e = {"name": name, "overload": "", "ns": "F", "params": names, "kinds": kinds,
             "npos": npos, "nreq": sum(1 for p in params[:npos] if p.default is inspect.Parameter.empty),
             "kwreq": [p.name for p in params[npos:] if p.default is inspect.Parameter.empty],
             "returns": "T"}
        spec = FUNCTIONAL.get(name)
        if "inplace" in names and spec and "inplace" in spec:
            e["inplace_param"] = "inplace"
        if spec is None:
            tparams = [p for p, k in zip(names, kinds) if k in "TtL"]
            target = composer.entries.get(name)
            if target is not None and all(
                    tp in names or (tp == "self" and "input" in names)
                    for tp, k in zip(target["params"], target["kinds"]) if k in "TtL"):
                composer.apply(e, [(name, A)], "decomposition")
            else:
                e.update(diff=True, saves={p: list(tparams) for p in tparams}, via="conservative")
            out.append(e)
            continue
        composer.apply_any(e, spec["steps"], "decomposition")
        out.append(e)
        if "inplace" in spec:
            ie = {k: v for k, v in e.items() if k not in ("saves", "diff", "via", "decomposes_to", "inplace_param")}
            ie.update(overload="inplace", inplace=True)
            composer.apply(ie, spec["inplace"], "decomposition")
            out.append(ie)
    return out, builtin_aliases


def python_keywords(entries):
    """``torch.functional``'s Python spellings of ATen tensor params, by position:
    ``torch.split(tensor=x, ...)`` calls ``split(Tensor self, ...)``.  Only names that differ,
    for functions with an explicit signature and an ATen op of the same name."""
    import torch.functional as tf
    out = {}
    for name in sorted(tf.__all__):
        native = [e for e in entries.values() if e["name"] == name and e["overload"] in ("", "Tensor")]
        try:
            ps = inspect.signature(getattr(tf, name)).parameters.values()
        except (TypeError, ValueError):
            continue
        if not native:
            continue
        py = [p.name for p in ps if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
        renames = {}
        for p, a, k in zip(py, native[0]["params"], native[0]["kinds"]):
            if k not in "TtL":  # past the tensors the Python signature may reorder (stft's center)
                break
            if p != a and not (p == "input" and a == "self"):
                renames[p] = a
        if renames:
            out[name] = renames
    return out


def python_defaults(entries):
    """The ATen params a Python-level wrapper gives a default where ATen requires them, by how
    it is called: ``torch.norm(x, dim=1)`` (``torch.functional.norm``, ``p="fro"``) and
    ``x.norm(dim=1)`` (``Tensor.norm`` in ``torch/_tensor.py``) run ``norm.ScalarOpt_dim``,
    which has no default for ``p``.  Only names with an ATen op whose overloads have the param."""
    import torch
    import torch.functional as tf
    wrappers = {"function": {n: getattr(tf, n) for n in tf.__all__},
                "method": {n: f for n, f in vars(torch.Tensor).items()
                           if inspect.isfunction(f) and f.__module__ == "torch._tensor" and not n.startswith("_")}}
    out = {}
    for how, funcs in wrappers.items():
        table = {}
        for name, fn in sorted(funcs.items()):
            aten = {p for e in entries.values() if e["name"] == name for p in e["params"]}
            try:
                ps = inspect.signature(fn).parameters.values()
            except (TypeError, ValueError):
                continue
            names = sorted({"self" if p.name == "input" else p.name for p in ps
                            if p.default is not inspect.Parameter.empty} & aten)
            if names:
                table[name] = names
        out[how] = table
    return out


def py_entries(composer):
    out = []
    for spec in PY_OPS:
        e = {k: v for k, v in spec.items() if k not in ("steps", "diff")}
        e["ns"] = "py"
        e["npos"] = len(e["params"])
        e["nreq"] = len(e["params"])
        e["variants"] = "m"
        if spec["steps"] is None:
            e["diff"] = spec.get("diff", True)
            e["via"] = "none"
        else:
            composer.apply_any(e, spec["steps"], "decomposition")
        out.append(e)
    return out


# --------------------------------------------------------------------------- main

# Internal ATen ops user code does not call (backends, sparse/quantized/nested
# tensors, foreach kernels, backward kernels).  Not shipped, to keep ops.json small,
# unless a decomposition refers to them; the loader's conservative default covers them.
INTERNAL = re.compile(
    r"^_foreach_|_backward|sparse|quantize|quantized|^q_|fbgemm|mkldnn|cudnn|miopen|^_nested"
    r"|^_test|^_fused_|^_flash|^_efficient|^_scaled_|_mps|^mps_|^_cslt|^_cufft|^_amp_|^_mkl"
    r"|^_sobol|fake_quant|^_thnn|^_weight_int|^_dyn_quant|^_int_mm|^_convert_weight|^_make_per"
    r"|^_use_|^_validate|^_assert|^_functional_|^_print|^_has_|^_debug|^_coalesce|^_indices"
    r"|^_values|indices$|^_chunk_cat|^_jagged|^_padded_dense|^_to_cpu|^_propagate_xla|^_philox"
    r"|^_histogramdd|^_embedding_bag_|^_cummax_helper|^_cummin_helper|^_lstm_mps|^_linalg_check"
    r"|^_transformer|^_native_multi_head|^_triton|^_masked_softmax|^_safe_softmax|^_spsolve"
    r"|^_transform_bias|^_autocast|^_batch_norm_|^_native_batch_norm_legit|^_ctc_loss|^_segment"
    r"|^_compute_linear|^_efficientzerotensor|^_fw_primal_copy|^_make_dual_copy|_copy$|^_copy_from"
    r"|^_resize_output|^_dirichlet|^_sample_dirichlet|^_standard_gamma|^_rowwise_prune|^_saturate"
    r"|^_choose_qparams|^_wrapped_|^_dimI|^_dimV|^_nnz|^_shape_as_tensor|^_reshape_from_tensor"
    r"|^_cast_|^_sym_|^sym_|^_functionalize|^_unsafe_|^_lazy_clone|^_conj_copy|^_neg_view_copy"
    r"|^_mixed_dtypes|^_grouped_mm|^_addmm_activation|^_fft_c2c_|^_index_put_impl|^_local_scalar"
    r"|^_stack|^_pin_memory|^_is_|^_logcumsumexp|^_aminmax|^_unique|^_nnpack|^_pdist|^_cdist"
    r"|^_euclidean|^_weight_norm|^_add_relu|^_new_zeros_with|^_print|^_ragged|^hash_tensor")


def _shipped(ops):
    keep = set()
    for e in ops:
        keep.update(e.get("decomposes_to", ()))
    return [e for e in ops if e["ns"] != "aten" or op_key(e) in keep or not INTERNAL.search(e["name"])]


# Field defaults: a field equal to its default is left out of the JSON.
DEFAULTS = {"ns": "aten", "differentiable": True, "via": "formula", "returns": "T",
            "view": False, "inplace": False, "variants": "fm"}


def _compact(e):
    e = dict(e)
    e["differentiable"] = e.pop("diff")
    if "npos" in e and e["npos"] == len(e["params"]):
        del e["npos"]
    if "nreq" in e and e["nreq"] == e.get("npos", len(e["params"])):
        del e["nreq"]
    if not e["differentiable"]:
        e.pop("saves", None)
    if not e.get("kwreq", True):
        del e["kwreq"]
    for k, v in DEFAULTS.items():
        if e.get(k, v) == v:
            e.pop(k, None)
    return e

def generate():
    import torch
    fns = load_native()
    entries = {}
    from torchgen.context import native_function_manager
    for fn in fns:
        with native_function_manager(fn.func):
            e = native_entry(fn)
        if e is not None:
            entries[op_key(e)] = e
    composer = Composer(entries)
    for key in list(entries):
        composer.finish_native(key)
    fentries, builtin_aliases = functional_entries(composer)
    pentries = py_entries(composer)
    ops = sorted(_shipped(list(entries.values()) + fentries + pentries),
                 key=lambda e: (e["ns"], e["name"], e["overload"]))
    names = {e["name"] for e in ops}
    aliases = dict(NAME_ALIASES)
    aliases.update((k, v) for k, v in builtin_aliases.items() if v in names and k not in names)
    # Every public name a Tensor has: anything else read off a value taken for a tensor means it
    # was something else (a model output object), and the analysis must not go on as if it were.
    attributes = sorted(n for n in dir(torch.Tensor) if not n.startswith("_") or n.startswith("__"))
    return {"torch": torch.__version__.split("+")[0], "aliases": dict(sorted(aliases.items())),
            "defaults": DEFAULTS, "tensor_attributes": attributes, "python_keywords": python_keywords(entries),
            "python_defaults": python_defaults(entries), "ops": [_compact(e) for e in ops]}


def dumps(data) -> str:
    head = {
        "_comment": ("GENERATED by scripts/gen_torch_knowledge.py from the torch wheel "
                     "(torchgen native_functions.yaml + derivatives.yaml, torch.nn.functional); "
                     "do not edit by hand, re-run the script.  Field meanings: see the script's docstring."),
        "torch": data["torch"],
        "aliases": data["aliases"],
        "defaults": data["defaults"],
        "tensor_attributes": data["tensor_attributes"],
        "python_keywords": data["python_keywords"],
        "python_defaults": data["python_defaults"],
    }
    lines = ["{"]
    for k, v in head.items():
        lines.append(json.dumps(k) + ": " + json.dumps(v, sort_keys=True, separators=(",", ":")) + ",")
    lines.append('"ops": [')
    ops = [json.dumps(op, sort_keys=True, separators=(",", ":")) for op in data["ops"]]
    lines.append(",\n".join(ops))
    lines.append("]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out-dir", default=OUT_DEFAULT, help="directory to write ops.json into")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    text = dumps(generate())
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "ops.json")
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    print(f"wrote {path}: {len(text.encode())} bytes in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
