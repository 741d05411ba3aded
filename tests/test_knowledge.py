"""Checks on GradGuard's torch knowledge (server/gradguard/knowledge).

Three layers:
* data checks that need no torch: the facts the rules rely on (what mul/mm/conv/
  softmax save, views, in-place ops, defaults, module table);
* an oracle against the installed torch: for each case, make one input require grad,
  bump the version of every input/output in turn (torch.autograd.graph.
  increment_version) and see whether backward then fails with "modified by an
  inplace operation" - exactly the tensors autograd saved - and compare with the data;
* the generator re-run into a temp dir must reproduce the shipped ops.json.
Tests needing torch skip (with the reason) when torch is not importable.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from gradguard import knowledge as K

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KNOWLEDGE_DIR = os.path.join(ROOT, "server", "gradguard", "knowledge")


def saves(name, kinds=(), keywords=(), **kw):
    info = K.resolve(name, kinds, keywords, **kw)
    return {p: set(v) for p, v in info.saves.items()}


def _torch():
    try:
        import torch  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"torch is not importable ({exc}); oracle checks need the real torch")
    return sys.modules["torch"]


# --------------------------------------------------------------------------- data

def test_sigmoid_saves_result():
    assert saves("sigmoid", method=True) == {"self": {"result"}}
    assert saves("torch.sigmoid", ["tensor"]) == {"self": {"result"}}


def test_mul_saves_the_other_operand_even_a_python_number():
    """mul.Scalar has no Python binding: `x * 2` wraps the 2 in a tensor and runs mul.Tensor,
    which saves it (a second backward through it raises)."""
    assert saves("__mul__", ["tensor"]) == {"self": {"other"}, "other": {"self"}}
    assert K.resolve("__mul__", ["tensor"]).key == "mul.Tensor"
    assert K.resolve("__mul__", ["number"]).key == "mul.Tensor"
    assert saves("__rmul__", ["number"]) == {"self": {"other"}, "other": {"self"}}
    assert saves("torch.mul", ["tensor", "number"]) == {"self": {"other"}, "other": {"self"}}
    assert saves("mul", ["tensor", "tensor"], method=False) == {"self": {"other"}, "other": {"self"}}
    assert saves("__add__", ["number"]) == {"self": set(), "other": set()}


def test_pow_overloads():
    assert K.resolve("__pow__", ["number"]).key == "pow.Tensor_Scalar"
    assert saves("__pow__", ["number"]) == {"self": {"self"}}
    assert K.resolve("pow", ["tensor"], method=True).key == "pow.Tensor_Tensor"
    assert saves("__rpow__", ["number"]) == {"self": {"self", "result"}}


def test_sum_and_mean_save_nothing():
    assert saves("sum", method=True) == {"self": set()}
    assert saves("sum", ["number"], method=True) == {"self": set()}
    assert saves("mean", method=True) == {"self": set()}


def test_mm_saves_each_operand_for_the_others_grad():
    s = saves("mm", ["tensor", "tensor"], method=False)
    assert s["mat2"] == {"self"}  # W requires grad -> X saved
    assert s["self"] == {"mat2"}  # X requires grad -> W saved
    assert saves("__matmul__", ["tensor"]) == {"self": {"other"}, "other": {"self"}}


def test_convolution_saves_input_and_weight():
    s = saves("convolution")
    assert s["input"] == {"input", "weight"} and s["weight"] == {"input", "weight"}
    assert s["bias"] == {"input", "weight"}  # one formula computes all three grads
    assert saves("F.conv2d", ["tensor", "tensor", "tensor"]) == s


def test_relu_saves_result():
    assert saves("relu", method=True) == {"self": {"result"}}
    assert saves("F.relu", ["tensor"]) == {"input": {"result"}}
    info = K.resolve("relu_", method=True)
    assert info.inplace and info.saves["self"] == {"result"}


def test_softmax_resolves_through__softmax():
    for call in (K.resolve("softmax", ["number"], method=True), K.resolve("F.softmax", ["tensor", "number"]),
                 K.resolve("torch.softmax", ["tensor", "number"])):
        assert call.differentiable
        assert set(next(iter(call.saves.values()))) == {"result"}, call
    assert "_softmax" in K.resolve("softmax", ["number"], method=True).decomposes_to
    assert saves("log_softmax", ["number"], method=True) == {"self": {"result"}}


def test_linear_saves_weight_for_input_and_input_for_weight():
    s = saves("F.linear", ["tensor", "tensor", "tensor"])
    assert s == {"input": {"weight"}, "weight": {"input"}, "bias": set()}


def test_cross_entropy_saves_target_not_input():
    s = saves("F.cross_entropy", ["tensor", "tensor"])
    assert s["input"] >= {"target"} and "input" not in s["input"] and "result" not in s["input"]
    assert "target" not in s  # integer class targets get no gradient


def test_pool_and_dropout_results_are_not_saved():
    # relu_(max_pool2d(x)) is the common ResNet pattern; the pool keeps its indices, not its output
    assert saves("F.max_pool2d", ["tensor", "number"]) == {"input": {"input"}}
    assert saves("F.dropout", ["tensor"]) == {"input": set()}


def test_nondifferentiable_ops():
    for name in ("argmax", "argmin", "argsort", "eq", "ne", "lt", "gt", "ge", "le", "isnan", "nonzero",
                 "__eq__", "__lt__", "long", "bool"):
        binary = name in ("eq", "ne", "lt", "gt", "ge", "le") or name.startswith("__")
        info = K.resolve(name, ["tensor"] if binary else [], method=True)
        assert info.known and not info.differentiable, name
        assert name in K.NONDIFF_METHODS, name
    assert K.resolve("round", method=True).differentiable  # zero gradient, but a grad_fn
    assert "round" not in K.NONDIFF_METHODS and "zeros" not in K.NONDIFF_METHODS  # factories: requires_grad=True
    assert K.resolve("floor_divide", ["tensor"], method=True).backward_implemented is False


def test_multi_output_ops():
    info = K.resolve("max", ["number"], method=True)
    assert info.key == "max.dim" and info.returns == "TT"
    assert info.differentiable_outputs == {0}  # indices never require grad
    assert info.saves["self"] == {"result1"}  # the indices are saved, the values are not
    assert K.resolve("max", [], method=True).key == "max"
    assert K.resolve("max", ["tensor"], method=True).key == "max.other"


def test_views():
    for name, kinds in (("view", ["number", "number"]), ("reshape", ["number"]), ("transpose", ["number", "number"]),
                        ("permute", ["number", "number"]), ("select", ["number", "number"]), ("expand", ["number"]),
                        ("squeeze", []), ("unsqueeze", ["number"]), ("t", []), ("T", []), ("narrow", ["number"] * 3),
                        ("chunk", ["number"]), ("split", ["number"]), ("unbind", []), ("diagonal", []),
                        ("as_strided", ["other", "other"]), ("view_as", ["tensor"]), ("unfold", ["number"] * 3),
                        ("flatten", []), ("detach", []), ("__getitem__", ["number"]), ("__getitem__", ["other"])):
        info = K.resolve(name, kinds, method=True)
        assert info.known and info.view and not info.inplace, name
    assert not K.resolve("__getitem__", ["tensor"]).view  # advanced indexing copies ...
    assert K.resolve("__getitem__", ["tensor"]).saves["self"] == {"indices"}  # ... and keeps the index
    assert not K.resolve("clone", method=True).view and not K.resolve("sum", method=True).view


def test_inplace_ops():
    for name, kinds in (("add_", ["tensor"]), ("relu_", []), ("masked_fill_", ["tensor", "number"]), ("zero_", []),
                        ("copy_", ["tensor"]), ("fill_", ["number"]), ("clamp_", ["number", "number"]),
                        ("mul_", ["number"]), ("sub_", ["tensor"]), ("div_", ["tensor"]),
                        ("scatter_", ["number", "tensor", "tensor"]), ("index_put_", ["other", "tensor"]),
                        ("__iadd__", ["tensor"]), ("__setitem__", ["number", "tensor"]),
                        ("__setitem__", ["tensor", "tensor"])):
        info = K.resolve(name, kinds, method=True)
        assert info.known and info.inplace and not info.view, name
    assert not K.resolve("add", ["tensor"], method=True).inplace
    # a saved `self` of an in-place op is a private clone: not listed
    assert K.resolve("mul_", ["tensor"], method=True).saves == {"self": {"other"}, "other": set()}
    # F functions with inplace=True
    ip = K.resolve("F.relu", ["tensor"], ["inplace"], inplace_flag=True)
    assert ip.inplace and ip.saves == {"input": {"result"}}
    assert not K.resolve("F.relu", ["tensor"]).inplace and K.resolve("F.relu", ["tensor"]).inplace_param == "inplace"


def test_dunders_and_aliases():
    expect = {"__add__": "add", "__radd__": "add", "__sub__": "sub", "__truediv__": "div", "__neg__": "neg",
              "__rsub__": "rsub", "__iadd__": "add_", "__imul__": "mul_", "__matmul__": "matmul"}
    for dunder, op in expect.items():
        assert K.resolve(dunder, ["tensor"] if dunder != "__neg__" else []).name == op, dunder
    assert K.resolve("__rtruediv__", ["number"]).saves == {"self": set()}  # reciprocal's result is internal
    assert K.resolve("torch.linalg.inv", ["tensor"]).name == "linalg_inv"
    assert K.resolve("F.logsigmoid", ["tensor"]).name == "log_sigmoid"
    assert K.is_known("torch.nn.functional.mse_loss") and K.is_known("F.grid_sample") and K.is_known("__getitem__")


def test_positional_binding_helpers():
    where = K.resolve("where", ["tensor", "tensor"], method=True)
    assert where.positional_params(method=True)[:2] == ("condition", "other")
    assert K.resolve("mul", ["tensor", "tensor"], method=False).param_for_keyword("input") == "self"
    assert K.resolve("view", ["number", "number", "number"], method=True).key == "view"  # varargs int list
    # torch.functional spells some tensor params its own way: `torch.split(tensor=x, ...)` binds ATen's self
    assert K.aten_keywords("torch.split", {"tensor": 1, "dim": 2}) == {"self": 1, "dim": 2}
    assert K.aten_keywords("torch.tensordot", {"a": 1, "b": 2, "dims": 3}) == {"self": 1, "other": 2, "dims": 3}
    assert K.aten_keywords("torch.mul", {"input": 1}) == {"input": 1}


def test_unknown_name_gets_the_conservative_default():
    info = K.resolve("frobnicate", ["tensor", "number", "unknown"], ["scale"], method=True)
    assert not info.known and info.source == "default"
    assert info.params == ("self", "arg0", "arg1", "arg2", "scale")
    assert info.tensor_params == {"self", "arg0", "arg2", "scale"}
    assert all(set(v) == set(info.tensor_params) for v in info.saves.values())
    assert set(info.saves) == set(info.tensor_params)
    assert info.differentiable and not info.view and not info.inplace
    assert not K.is_known("frobnicate")
    for bad in ("", ".", "torch.", "...x", None, 3):
        assert isinstance(K.resolve(bad, ["tensor"]), K.OpInfo)  # never raises, never None


def test_opinfo_is_hashable_and_cached():
    a = K.resolve("mul", ["tensor"], method=True)
    assert a is K.resolve("mul", ["tensor"], method=True)
    assert hash(a) == hash(K.resolve("mul", ("tensor",), method=True))


def test_module_info():
    lin = K.module_info("Linear")
    assert lin.has_params and lin.op == "linear" and lin.param_params == ("weight", "bias")
    assert K.module_info("torch.nn.Linear") == lin and K.module_info("nn.modules.linear.Linear") == lin
    relu = K.module_info("ReLU")
    assert not relu.has_params and relu.inplace_arg == "inplace" and relu.inplace_pos == 0
    assert relu.op_info().saves == {"self": {"result"}} and relu.op_info(inplace=True).inplace
    assert K.module_info("LeakyReLU").inplace_pos == 1
    assert K.module_info("Sequential").container and K.module_info("ModuleList").container
    assert K.module_info("LSTM").recurrent and K.module_info("LSTM").returns_tuple
    assert K.module_info("Conv2d").op == "convolution"
    assert K.module_info("MyModel") is None and K.module_info(None) is None
    assert K.module_info("Linear").op_info().saves["weight"] == {"input"}


def test_api_tables():
    assert {"tensor", "randn", "zeros", "arange", "from_numpy", "zeros_like", "LongTensor"} <= K.FACTORIES
    assert "normal" in K.FACTORIES_NUMBERS_ONLY and "new_zeros" in K.FACTORY_METHODS
    assert {"item", "tolist", "numpy", "__bool__", "__len__", "size", "dim", "numel"} <= K.GRAPH_FREE_METHODS
    assert {"shape", "dtype", "device"} <= K.GRAPH_FREE_ATTRIBUTES
    assert K.DETACH_METHODS == {"detach", "detach_"} and K.DETACH_ATTRIBUTES == {"data"}
    assert {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
            "torch.autograd.grad_mode.no_grad"} <= K.NO_GRAD_CONTEXTS
    assert "torch.enable_grad" in K.ENABLE_GRAD_CONTEXTS and "torch.set_grad_enabled" in K.SET_GRAD_ENABLED
    assert {"SGD", "Adam", "AdamW", "LBFGS", "SparseAdam"} <= K.OPTIMIZERS
    assert K.OPTIMIZER_STEP_METHODS == {"step"} and K.ZERO_GRAD_METHODS == {"zero_grad"}
    b = K.BACKWARD_CALLS
    assert b.tensor_method == "backward" and b.tensor_method_args["retain_graph_arg"] == 1
    assert set(b.functions) == {"torch.autograd.backward", "torch.autograd.grad"}
    assert {"manual_backward", "backward"} <= set(b.loss_methods) and "scale" in b.passthrough_methods
    assert b.retain_graph_keyword == "retain_graph" and b.create_graph_keyword == "create_graph"
    assert K.REQUIRES_GRAD_KEYWORD == "requires_grad" and K.TORCH_VERSION.startswith("2.")


def test_data_is_consistent():
    with open(os.path.join(KNOWLEDGE_DIR, "ops.json"), encoding="utf-8") as fh:
        text = fh.read()
    data = json.loads(text)
    keys = {(o.get("ns", "aten"), o["name"], o["overload"]) for o in data["ops"]}
    assert len(keys) == len(data["ops"])
    aten = {o["name"] + ("." + o["overload"] if o["overload"] else "")
            for o in data["ops"] if o.get("ns", "aten") == "aten"}
    for o in data["ops"]:
        assert len(o["kinds"]) == len(o["params"]), o["name"]
        for t in o.get("decomposes_to", ()):
            assert t in aten, (o["name"], t)
        for p, saved in o.get("saves", {}).items():
            assert p in o["params"], (o["name"], p)
            for s in saved:
                assert s in o["params"] or s.startswith("result"), (o["name"], s)
    for alias, target in data["aliases"].items():
        assert K.is_known(target), alias
    for name, m in K._modules().items():
        assert m.op is None or K.is_known(m.op), name
        info = m.op_info()
        if info is not None:
            assert set(m.input_params) | set(m.param_params) <= set(info.params), name
    assert len(text) < 400_000  # ships in the package
    assert "GENERATED" in data["_comment"]
    with open(os.path.join(KNOWLEDGE_DIR, "api.json"), encoding="utf-8") as fh:
        assert "HAND-CURATED" in json.load(fh)["_comment"]


def test_import_never_imports_torch():
    code = ("import sys, time; t = time.process_time(); import gradguard.knowledge as K; "
            "K.resolve('mul', ['tensor']); K.module_info('Linear'); K.NONDIFF_METHODS; "
            "assert 'torch' not in sys.modules and 'torchgen' not in sys.modules; "
            "print(time.process_time() - t)")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "server"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert float(out.stdout) < 1.0


# --------------------------------------------------------------------------- oracle

def _observe(call, make, p, nonleaf=()):
    """Inputs / outputs ("result", "resultK") whose in-place change (version bump)
    makes backward fail when only input `p` requires grad; None if p gets no grad."""
    torch = _torch()
    from torch.autograd.graph import increment_version

    def outs_of(o):
        return list(o) if isinstance(o, (tuple, list)) else [o]

    def fresh():
        t = {k: v() for k, v in make.items()}
        t[p] = t[p].detach().requires_grad_(True)
        if p in nonleaf:
            t[p] = t[p] * 1  # in-place ops need a non-leaf
        return t

    try:
        outs = outs_of(call(fresh()))
    except RuntimeError as exc:
        if "is not differentiable with respect to argument" in str(exc):
            return None
        raise
    if not any(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
        return None
    found = set()
    for c in list(make) + [f"result{i}" if i else "result" for i in range(len(outs))]:
        t = fresh()
        outs = outs_of(call(t))
        increment_version(outs[int(c[6:] or 0)] if c.startswith("result") else t[c])
        loss = sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)
        try:
            loss.backward()
        except RuntimeError as exc:
            if "modified by an inplace operation" not in str(exc):
                raise
            found.add(c)
    return found


class _Lazy:
    """A module imported on first use: collecting the case ids must not import torch (seconds,
    in every test process)."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self.name), attr)


def _cases():
    """(id, resolve args, {param: factory}, call) - params named as the resolved OpInfo names them."""
    torch, F = _Lazy("torch"), _Lazy("torch.nn.functional")

    def r(*s):
        return lambda: torch.randn(*s)

    def pos(*s):
        return lambda: torch.rand(*s) + 0.5

    def prob(*s):
        return lambda: torch.rand(*s).clamp(0.05, 0.95)

    def lng(hi, *s):
        return lambda: torch.randint(0, hi, s)

    def mask(*s):
        return lambda: torch.rand(*s) > 0.5

    def eye3():
        return torch.eye(3) + 0.1 * torch.randn(3, 3)

    M = dict(method=True)
    Fn = dict(method=False)
    return [
        ("sigmoid", ("sigmoid", [], M), {"self": r(3)}, lambda t: t["self"].sigmoid()),
        ("tanh", ("tanh", [], M), {"self": r(3)}, lambda t: t["self"].tanh()),
        ("exp", ("exp", [], M), {"self": r(3)}, lambda t: t["self"].exp()),
        ("log", ("log", [], M), {"self": pos(3)}, lambda t: t["self"].log()),
        ("sqrt", ("sqrt", [], M), {"self": pos(3)}, lambda t: t["self"].sqrt()),
        ("abs", ("abs", [], M), {"self": r(3)}, lambda t: t["self"].abs()),
        ("relu", ("relu", [], M), {"self": r(3)}, lambda t: t["self"].relu()),
        ("clamp", ("clamp", ["number", "number"], M), {"self": r(3)}, lambda t: t["self"].clamp(-0.5, 0.5)),
        ("x*y", ("__mul__", ["tensor"], M), {"self": r(3), "other": r(3)}, lambda t: t["self"] * t["other"]),
        ("x*2", ("__mul__", ["number"], M), {"self": r(3)}, lambda t: t["self"] * 2),
        ("2*x", ("__rmul__", ["number"], M), {"self": r(3)}, lambda t: 2 * t["self"]),
        ("x**2", ("__pow__", ["number"], M), {"self": r(3)}, lambda t: t["self"] ** 2),
        ("x**y", ("__pow__", ["tensor"], M), {"self": pos(3), "exponent": r(3)}, lambda t: t["self"] ** t["exponent"]),
        ("2**x", ("__rpow__", ["number"], M), {"self": r(3)}, lambda t: 2 ** t["self"]),
        ("x/y", ("__truediv__", ["tensor"], M), {"self": r(3), "other": pos(3)}, lambda t: t["self"] / t["other"]),
        ("2/x", ("__rtruediv__", ["number"], M), {"self": pos(3)}, lambda t: 2 / t["self"]),
        ("x+y", ("__add__", ["tensor"], M), {"self": r(3), "other": r(3)}, lambda t: t["self"] + t["other"]),
        ("1-x", ("__rsub__", ["number"], M), {"self": r(3)}, lambda t: 1 - t["self"]),
        ("-x", ("__neg__", [], M), {"self": r(3)}, lambda t: -t["self"]),
        ("x@w", ("__matmul__", ["tensor"], M), {"self": r(2, 3), "other": r(3, 4)}, lambda t: t["self"] @ t["other"]),
        ("x@w-3d", ("__matmul__", ["tensor"], M), {"self": r(5, 2, 3), "other": r(3, 4)},
         lambda t: t["self"] @ t["other"]),
        ("x[0]", ("__getitem__", ["number"], M), {"self": r(3, 4)}, lambda t: t["self"][0]),
        ("x[idx]", ("__getitem__", ["tensor"], M), {"self": r(5, 4), "indices": lng(5, 3)},
         lambda t: t["self"][t["indices"]]),
        ("sum", ("sum", [], M), {"self": r(3)}, lambda t: t["self"].sum()),
        ("mean", ("mean", [], M), {"self": r(3)}, lambda t: t["self"].mean()),
        ("prod", ("prod", [], M), {"self": r(5)}, lambda t: t["self"].prod()),
        ("cumsum", ("cumsum", ["number"], M), {"self": r(5)}, lambda t: t["self"].cumsum(0)),
        ("std", ("std", [], M), {"self": r(5)}, lambda t: t["self"].std()),
        ("var", ("var", [], M), {"self": r(5)}, lambda t: t["self"].var()),
        ("norm", ("norm", [], M), {"self": r(3)}, lambda t: t["self"].norm()),
        ("max()", ("max", [], M), {"self": r(3)}, lambda t: t["self"].max()),
        ("max(dim)", ("max", ["number"], M), {"self": r(3, 4)}, lambda t: t["self"].max(1)),
        ("sort", ("sort", [], M), {"self": r(5)}, lambda t: t["self"].sort()),
        ("topk", ("topk", ["number"], M), {"self": r(5)}, lambda t: t["self"].topk(2)),
        ("logsumexp", ("logsumexp", ["number"], M), {"self": r(5)}, lambda t: t["self"].logsumexp(0)),
        ("mm", ("mm", ["tensor", "tensor"], Fn), {"self": r(2, 3), "mat2": r(3, 4)},
         lambda t: torch.mm(t["self"], t["mat2"])),
        ("bmm", ("bmm", ["tensor", "tensor"], Fn), {"self": r(2, 2, 3), "mat2": r(2, 3, 4)},
         lambda t: torch.bmm(t["self"], t["mat2"])),
        ("addmm", ("addmm", ["tensor"] * 3, Fn), {"self": r(4), "mat1": r(2, 3), "mat2": r(3, 4)},
         lambda t: torch.addmm(t["self"], t["mat1"], t["mat2"])),
        ("matmul-1d", ("matmul", ["tensor", "tensor"], Fn), {"self": r(3), "other": r(3)},
         lambda t: torch.matmul(t["self"], t["other"])),
        ("outer", ("outer", ["tensor", "tensor"], Fn), {"self": r(3), "vec2": r(4)},
         lambda t: torch.outer(t["self"], t["vec2"])),
        ("dot", ("dot", ["tensor"], M), {"self": r(3), "tensor": r(3)}, lambda t: t["self"].dot(t["tensor"])),
        ("where", ("where", ["tensor"] * 3, Fn), {"condition": mask(3), "self": r(3), "other": r(3)},
         lambda t: torch.where(t["condition"], t["self"], t["other"])),
        ("masked_fill", ("masked_fill", ["tensor", "number"], M), {"self": r(3), "mask": mask(3)},
         lambda t: t["self"].masked_fill(t["mask"], 0.0)),
        ("gather", ("gather", ["number", "tensor"], M), {"self": r(3, 4), "index": lng(4, 3, 2)},
         lambda t: t["self"].gather(1, t["index"])),
        ("scatter", ("scatter", ["number", "tensor", "tensor"], M),
         {"self": r(3, 4), "index": lng(3, 3, 2), "src": r(3, 2)},
         lambda t: t["self"].scatter(1, t["index"], t["src"])),
        ("softmax", ("softmax", ["number"], M), {"self": r(3, 4)}, lambda t: t["self"].softmax(1)),
        ("log_softmax", ("log_softmax", ["number"], M), {"self": r(3, 4)}, lambda t: t["self"].log_softmax(1)),
        ("reshape", ("reshape", ["number"], M), {"self": r(2, 3)}, lambda t: t["self"].reshape(6)),
        ("contiguous", ("contiguous", [], M), {"self": r(5)}, lambda t: t["self"].contiguous()),
        ("square", ("square", [], M), {"self": r(3)}, lambda t: t["self"].square()),
        ("to-double", ("to", ["other"], M), {"self": r(3)}, lambda t: t["self"].to(torch.float64)),
        ("cross", ("cross", ["tensor"], M), {"self": r(3), "other": r(3)},
         lambda t: torch.cross(t["self"], t["other"], dim=0)),
        ("inverse", ("inverse", [], M), {"self": eye3}, lambda t: t["self"].inverse()),
        ("det", ("det", [], M), {"self": eye3}, lambda t: t["self"].det()),
        ("linalg.inv", ("torch.linalg.inv", ["tensor"], Fn), {"A": eye3}, lambda t: torch.linalg.inv(t["A"])),
        ("tensordot", ("tensordot", ["tensor", "tensor"], dict(method=False, keywords=["dims"])),
         {"self": r(2, 3), "other": r(3, 4)}, lambda t: torch.tensordot(t["self"], t["other"], dims=1)),
        ("fft", ("torch.fft.fft", ["tensor"], Fn), {"self": r(8)}, lambda t: torch.fft.fft(t["self"]).real),
        ("F.relu", ("F.relu", ["tensor"], Fn), {"input": r(3)}, lambda t: F.relu(t["input"])),
        ("F.gelu", ("F.gelu", ["tensor"], Fn), {"self": r(3)}, lambda t: F.gelu(t["self"])),
        ("F.silu", ("F.silu", ["tensor"], Fn), {"input": r(3)}, lambda t: F.silu(t["input"])),
        ("F.leaky_relu", ("F.leaky_relu", ["tensor"], Fn), {"input": r(3)}, lambda t: F.leaky_relu(t["input"])),
        ("F.elu", ("F.elu", ["tensor"], Fn), {"input": r(3)}, lambda t: F.elu(t["input"])),
        ("F.softplus", ("F.softplus", ["tensor"], Fn), {"self": r(3)}, lambda t: F.softplus(t["self"])),
        ("F.logsigmoid", ("F.logsigmoid", ["tensor"], Fn), {"self": r(3)}, lambda t: F.logsigmoid(t["self"])),
        ("F.softsign", ("F.softsign", ["tensor"], Fn), {"input": r(3)}, lambda t: F.softsign(t["input"])),
        ("F.relu6", ("F.relu6", ["tensor"], Fn), {"input": r(3)}, lambda t: F.relu6(t["input"])),
        ("F.hardswish", ("F.hardswish", ["tensor"], Fn), {"input": r(3)}, lambda t: F.hardswish(t["input"])),
        ("F.glu", ("F.glu", ["tensor"], Fn), {"input": r(4)}, lambda t: F.glu(t["input"])),
        ("F.softmin", ("F.softmin", ["tensor"], dict(method=False, keywords=["dim"])), {"input": r(3, 4)},
         lambda t: F.softmin(t["input"], dim=1)),
        ("F.normalize", ("F.normalize", ["tensor"], Fn), {"input": r(3, 4)}, lambda t: F.normalize(t["input"])),
        ("F.linear", ("F.linear", ["tensor"] * 3, Fn), {"input": r(2, 3), "weight": r(4, 3), "bias": r(4)},
         lambda t: F.linear(t["input"], t["weight"], t["bias"])),
        ("F.linear-3d", ("F.linear", ["tensor"] * 3, Fn), {"input": r(5, 2, 3), "weight": r(4, 3), "bias": r(4)},
         lambda t: F.linear(t["input"], t["weight"], t["bias"])),
        ("F.bilinear", ("F.bilinear", ["tensor"] * 4, Fn),
         {"input1": r(2, 3), "input2": r(2, 5), "weight": r(4, 3, 5), "bias": r(4)},
         lambda t: F.bilinear(t["input1"], t["input2"], t["weight"], t["bias"])),
        ("F.conv2d", ("F.conv2d", ["tensor"] * 3, Fn), {"input": r(1, 2, 5, 5), "weight": r(3, 2, 3, 3), "bias": r(3)},
         lambda t: F.conv2d(t["input"], t["weight"], t["bias"])),
        ("F.conv_transpose2d", ("F.conv_transpose2d", ["tensor"] * 3, Fn),
         {"input": r(1, 2, 5, 5), "weight": r(2, 3, 3, 3), "bias": r(3)},
         lambda t: F.conv_transpose2d(t["input"], t["weight"], t["bias"])),
        ("F.max_pool2d", ("F.max_pool2d", ["tensor", "number"], Fn), {"input": r(1, 1, 4, 4)},
         lambda t: F.max_pool2d(t["input"], 2)),
        ("F.avg_pool2d", ("F.avg_pool2d", ["tensor", "number"], Fn), {"self": r(1, 1, 4, 4)},
         lambda t: F.avg_pool2d(t["self"], 2)),
        ("F.adaptive_avg_pool2d", ("F.adaptive_avg_pool2d", ["tensor", "number"], Fn), {"input": r(1, 1, 4, 4)},
         lambda t: F.adaptive_avg_pool2d(t["input"], 2)),
        ("F.adaptive_max_pool2d", ("F.adaptive_max_pool2d", ["tensor", "number"], Fn), {"input": r(1, 1, 4, 4)},
         lambda t: F.adaptive_max_pool2d(t["input"], 2)),
        ("F.dropout", ("F.dropout", ["tensor"], Fn), {"input": r(10)}, lambda t: F.dropout(t["input"], 0.5, True)),
        ("F.layer_norm", ("F.layer_norm", ["tensor", "other", "tensor", "tensor"], Fn),
         {"input": r(2, 3), "weight": r(3), "bias": r(3)},
         lambda t: F.layer_norm(t["input"], (3,), t["weight"], t["bias"])),
        ("F.group_norm", ("F.group_norm", ["tensor", "number", "tensor", "tensor"], Fn),
         {"input": r(2, 4, 3), "weight": r(4), "bias": r(4)},
         lambda t: F.group_norm(t["input"], 2, t["weight"], t["bias"])),
        ("F.batch_norm-train", ("F.batch_norm", ["tensor"] * 5 + ["number"], Fn),
         {"input": r(4, 3), "running_mean": r(3), "running_var": pos(3), "weight": r(3), "bias": r(3)},
         lambda t: F.batch_norm(t["input"], t["running_mean"], t["running_var"], t["weight"], t["bias"], True)),
        ("F.batch_norm-eval", ("F.batch_norm", ["tensor"] * 5, Fn),
         {"input": r(4, 3), "running_mean": r(3), "running_var": pos(3), "weight": r(3), "bias": r(3)},
         lambda t: F.batch_norm(t["input"], t["running_mean"], t["running_var"], t["weight"], t["bias"], False)),
        ("F.embedding", ("F.embedding", ["tensor", "tensor"], Fn), {"input": lng(5, 3), "weight": r(5, 2)},
         lambda t: F.embedding(t["input"], t["weight"])),
        ("F.mse_loss", ("F.mse_loss", ["tensor", "tensor"], Fn), {"input": r(3), "target": r(3)},
         lambda t: F.mse_loss(t["input"], t["target"])),
        ("F.l1_loss", ("F.l1_loss", ["tensor", "tensor"], Fn), {"input": r(3), "target": r(3)},
         lambda t: F.l1_loss(t["input"], t["target"])),
        ("F.smooth_l1_loss", ("F.smooth_l1_loss", ["tensor", "tensor"], Fn), {"input": r(3), "target": r(3)},
         lambda t: F.smooth_l1_loss(t["input"], t["target"])),
        ("F.cross_entropy", ("F.cross_entropy", ["tensor"] * 3, Fn),
         {"input": r(4, 5), "target": lng(5, 4), "weight": pos(5)},
         lambda t: F.cross_entropy(t["input"], t["target"], t["weight"])),
        ("F.nll_loss", ("F.nll_loss", ["tensor", "tensor"], Fn), {"input": r(4, 5), "target": lng(5, 4)},
         lambda t: F.nll_loss(t["input"], t["target"])),
        ("F.binary_cross_entropy", ("F.binary_cross_entropy", ["tensor", "tensor"], Fn),
         {"input": prob(4), "target": prob(4)}, lambda t: F.binary_cross_entropy(t["input"], t["target"])),
        ("F.bce_with_logits", ("F.binary_cross_entropy_with_logits", ["tensor", "tensor"], Fn),
         {"input": r(4), "target": prob(4)}, lambda t: F.binary_cross_entropy_with_logits(t["input"], t["target"])),
        ("F.kl_div", ("F.kl_div", ["tensor", "tensor"], Fn), {"input": r(4), "target": prob(4)},
         lambda t: F.kl_div(t["input"], t["target"], reduction="batchmean")),
        ("F.cosine_similarity", ("F.cosine_similarity", ["tensor", "tensor"], Fn), {"x1": r(2, 3), "x2": r(2, 3)},
         lambda t: F.cosine_similarity(t["x1"], t["x2"])),
        ("F.pairwise_distance", ("F.pairwise_distance", ["tensor", "tensor"], Fn), {"x1": r(2, 3), "x2": r(2, 3)},
         lambda t: F.pairwise_distance(t["x1"], t["x2"])),
        ("F.grid_sample", ("F.grid_sample", ["tensor", "tensor"], Fn),
         {"input": r(1, 1, 4, 4), "grid": lambda: torch.rand(1, 2, 2, 2) * 2 - 1},
         lambda t: F.grid_sample(t["input"], t["grid"], align_corners=False)),
        ("F.interpolate", ("F.interpolate", ["tensor"], Fn), {"input": r(1, 1, 4, 4)},
         lambda t: F.interpolate(t["input"], scale_factor=2)),
        ("F.pad", ("F.pad", ["tensor", "other"], Fn), {"input": r(1, 4)}, lambda t: F.pad(t["input"], (1, 1))),
        ("F.prelu", ("F.prelu", ["tensor", "tensor"], Fn), {"self": r(2, 3), "weight": r(1)},
         lambda t: F.prelu(t["self"], t["weight"])),
        # in place (self is made a non-leaf when it requires grad; its result *is* self)
        ("add_", ("add_", ["tensor"], M), {"self": r(3), "other": r(3)}, lambda t: t["self"].add_(t["other"])),
        ("mul_", ("mul_", ["tensor"], M), {"self": r(3), "other": r(3)}, lambda t: t["self"].mul_(t["other"])),
        ("div_", ("div_", ["tensor"], M), {"self": r(3), "other": pos(3)}, lambda t: t["self"].div_(t["other"])),
        ("relu_", ("relu_", [], M), {"self": r(3)}, lambda t: t["self"].relu_()),
        ("sigmoid_", ("sigmoid_", [], M), {"self": r(3)}, lambda t: t["self"].sigmoid_()),
        ("exp_", ("exp_", [], M), {"self": r(3)}, lambda t: t["self"].exp_()),
        ("pow_", ("pow_", ["number"], M), {"self": r(3)}, lambda t: t["self"].pow_(2)),
        ("masked_fill_", ("masked_fill_", ["tensor", "number"], M), {"self": r(3), "mask": mask(3)},
         lambda t: t["self"].masked_fill_(t["mask"], 0.0)),
        ("clamp_", ("clamp_", ["number", "number"], M), {"self": r(3)}, lambda t: t["self"].clamp_(-0.5, 0.5)),
        ("copy_", ("copy_", ["tensor"], M), {"self": r(3), "src": r(3)}, lambda t: t["self"].copy_(t["src"])),
        ("x[idx]=v", ("__setitem__", ["tensor", "tensor"], M), {"self": r(5), "indices": lng(5, 2), "value": r(2)},
         lambda t: t["self"].__setitem__(t["indices"], t["value"]) or t["self"]),
        ("x[0]=v", ("__setitem__", ["number", "tensor"], M), {"self": r(5, 2), "value": r(2)},
         lambda t: t["self"].__setitem__(0, t["value"]) or t["self"]),
        ("F.relu-inplace", ("F.relu", ["tensor"], dict(method=False, keywords=["inplace"], inplace_flag=True)),
         {"input": r(3)}, lambda t: F.relu(t["input"], inplace=True)),
        ("F.dropout-inplace", ("F.dropout", ["tensor"], dict(method=False, keywords=["inplace"], inplace_flag=True)),
         {"input": r(10)}, lambda t: F.dropout(t["input"], 0.5, True, inplace=True)),
    ]


# The data records the union over what different backends run; the CPU oracle sees one of them.
SUPERSET_ONLY = {"F.rms_norm", "F.scaled_dot_product_attention"}


@pytest.fixture(scope="module")
def cases():
    _torch()
    return {c[0]: c for c in _cases()}


@pytest.mark.parametrize("case_id", [c[0] for c in _cases()])
def test_saves_match_torch(case_id, cases):
    """For every float input: the tensors the data says are saved == those torch
    actually guards with its version counter (torch 2.13 CPU)."""
    _, (name, kinds, kw), make, call = cases[case_id]
    kw = dict(kw)
    info = K.resolve(name, kinds, kw.pop("keywords", ()), **kw)
    assert info.known, info
    nonleaf = {info.params[0]} if info.inplace else set()
    for p in make:
        sample = make[p]()
        if not sample.is_floating_point():
            continue
        assert p in info.params, (p, info.key, info.params)
        observed = _observe(call, make, p, nonleaf)
        if observed is not None and info.inplace:
            # the in-place op returns self: bumping one bumps the other
            observed = {("result" if o == info.params[0] else o) for o in observed}
        predicted = None
        if info.differentiable and p in info.saves:
            predicted = set(info.saves[p]) & (set(make) | {"result", "result1", "result2"})
        assert (observed is None) == (predicted is None), (info.key, p, predicted, observed)
        if observed is not None:
            if case_id in SUPERSET_ONLY:
                assert predicted >= observed, (info.key, p, predicted, observed)
            else:
                assert predicted == observed, (info.key, p, predicted, observed)


def test_union_ops_are_supersets_of_cpu_behaviour():
    torch = _torch()
    import torch.nn.functional as F
    info = K.resolve("F.rms_norm", ["tensor", "other", "tensor"])
    make = {"input": lambda: torch.randn(2, 3), "weight": lambda: torch.randn(3)}
    for p in make:
        assert set(info.saves[p]) >= _observe(lambda t: F.rms_norm(t["input"], (3,), t["weight"]), make, p)
    info = K.resolve("F.scaled_dot_product_attention", ["tensor"] * 3)
    make = {k: (lambda: torch.randn(1, 2, 3)) for k in ("query", "key", "value")}
    for p in make:
        obs = _observe(lambda t: F.scaled_dot_product_attention(t["query"], t["key"], t["value"]), make, p)
        assert set(info.saves[p]) >= obs


MODULE_CASES = [
    # class name, constructor, input factories (by input_params order), call kwargs
    ("Linear", lambda nn: nn.Linear(3, 4), [lambda t: t.randn(2, 3)]),
    ("Conv2d", lambda nn: nn.Conv2d(2, 3, 3), [lambda t: t.randn(1, 2, 5, 5)]),
    ("ReLU", lambda nn: nn.ReLU(), [lambda t: t.randn(3)]),
    ("Sigmoid", lambda nn: nn.Sigmoid(), [lambda t: t.randn(3)]),
    ("Tanh", lambda nn: nn.Tanh(), [lambda t: t.randn(3)]),
    ("Softmax", lambda nn: nn.Softmax(dim=1), [lambda t: t.randn(2, 3)]),
    ("LeakyReLU", lambda nn: nn.LeakyReLU(0.2), [lambda t: t.randn(3)]),
    ("GELU", lambda nn: nn.GELU(), [lambda t: t.randn(3)]),
    ("Dropout", lambda nn: nn.Dropout(0.5), [lambda t: t.randn(10)]),
    ("Embedding", lambda nn: nn.Embedding(5, 2), [lambda t: t.randint(0, 5, (3,))]),
    ("LayerNorm", lambda nn: nn.LayerNorm(3), [lambda t: t.randn(2, 3)]),
    ("BatchNorm2d", lambda nn: nn.BatchNorm2d(2), [lambda t: t.randn(3, 2, 2, 2)]),
    ("GroupNorm", lambda nn: nn.GroupNorm(2, 4), [lambda t: t.randn(2, 4, 3)]),
    ("PReLU", lambda nn: nn.PReLU(), [lambda t: t.randn(2, 3)]),
    ("MaxPool2d", lambda nn: nn.MaxPool2d(2), [lambda t: t.randn(1, 1, 4, 4)]),
    ("Flatten", lambda nn: nn.Flatten(), [lambda t: t.randn(2, 3, 2)]),
    ("MSELoss", lambda nn: nn.MSELoss(), [lambda t: t.randn(3), lambda t: t.randn(3)]),
    ("L1Loss", lambda nn: nn.L1Loss(), [lambda t: t.randn(3), lambda t: t.randn(3)]),
    ("CrossEntropyLoss", lambda nn: nn.CrossEntropyLoss(), [lambda t: t.randn(4, 5), lambda t: t.randint(0, 5, (4,))]),
    ("NLLLoss", lambda nn: nn.NLLLoss(), [lambda t: t.randn(4, 5), lambda t: t.randint(0, 5, (4,))]),
    ("BCELoss", lambda nn: nn.BCELoss(), [lambda t: t.rand(4).clamp(0.1, 0.9), lambda t: t.rand(4)]),
    ("BCEWithLogitsLoss", lambda nn: nn.BCEWithLogitsLoss(), [lambda t: t.randn(4), lambda t: t.rand(4)]),
]


@pytest.mark.parametrize("cls_name,ctor,inputs", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_module_calls_match_torch(cls_name, ctor, inputs):
    """A module call saves what module_info(...).op_info() says for its inputs and
    parameters (all parameters require grad, as constructed)."""
    torch = _torch()
    from torch.autograd.graph import increment_version
    mi = K.module_info(cls_name)
    info = mi.op_info()
    assert mi.has_params == bool(list(ctor(torch.nn).parameters()))
    names = list(mi.input_params)
    for input_requires_grad in (True, False):
        def run():
            torch.manual_seed(0)
            m = ctor(torch.nn).train()
            args = [f(torch) for f in inputs]
            if input_requires_grad and args[0].is_floating_point():
                args[0].requires_grad_(True)
            bound = dict(zip(names, args))
            bound.update({p: getattr(m, p) for p in mi.param_params if getattr(m, p, None) is not None})
            return m, bound, m(*args)
        _, bound, out = run()
        if not out.requires_grad:
            continue
        needing = {p for p, v in bound.items() if isinstance(v, torch.Tensor) and v.requires_grad}
        predicted = set(info.saved_when(needing)) & (set(bound) | {"result"})
        observed = set()
        for c in list(bound) + ["result"]:
            _, b, out = run()
            increment_version(out if c == "result" else b[c])
            try:
                out.sum().backward()
            except RuntimeError as exc:
                assert "modified by an inplace operation" in str(exc)
                observed.add(c)
        assert predicted == observed, (cls_name, input_requires_grad, predicted, observed)


@pytest.mark.parametrize("cls_name,ctor,inputs", MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_layer_parameter_names_are_torchs(cls_name, ctor, inputs):
    """Where the op's parameters are `weight` and `bias`, they are the layer's own parameters,
    in torch's order (`named_parameters()` names them so)."""
    torch = _torch()
    mi = K.module_info(cls_name)
    if set(mi.param_params) <= {"weight", "bias"}:
        own = [n for n, _ in ctor(torch.nn).named_parameters(recurse=False)]
        assert own == (list(mi.param_params) if mi.has_params else []), cls_name


RECURRENT_CASES = [(cls, 1, True, False, 0) for cls in ("RNN", "LSTM", "GRU")] + \
    [(cls, 2, False, True, 0) for cls in ("RNN", "LSTM", "GRU")] + [("LSTM", 3, True, True, 2)]


@pytest.mark.parametrize("cls_name,layers,bias,bidirectional,proj", RECURRENT_CASES)
def test_recurrent_parameter_names_are_torchs(cls_name, layers, bias, bidirectional, proj):
    torch = _torch()
    extra = {"proj_size": proj} if proj else {}
    layer = getattr(torch.nn, cls_name)(4, 6, layers, bias=bias, bidirectional=bidirectional, **extra)
    assert K.RECURRENT_PARAMETERS.names(layers, bias, bidirectional, proj > 0) == \
        tuple(n for n, _ in layer.named_parameters())


def test_module_attributes_are_torchs():
    torch = _torch()
    assert K.MODULE_ATTRIBUTES == set(dir(torch.nn.Module()))


def test_api_names_exist_in_torch():
    torch = _torch()
    import inspect

    def lookup(dotted):
        obj = None
        for i, part in enumerate(dotted.split(".")):
            obj = torch if i == 0 else getattr(obj, part)
        return obj

    for name in K.FACTORIES:
        assert hasattr(torch, name), name
    for name in K.FACTORY_METHODS | (K.GRAPH_FREE_METHODS - {"numpy"}) | K.DETACH_METHODS:
        assert hasattr(torch.Tensor, name), name
    for name in K.GRAPH_FREE_ATTRIBUTES | K.DETACH_ATTRIBUTES:
        assert hasattr(torch.Tensor, name), name
    for dotted in K.NO_GRAD_CONTEXTS | K.ENABLE_GRAD_CONTEXTS | K.SET_GRAD_ENABLED:
        lookup(dotted)
    for dotted, mode in K.GRAD_MODE_QUERIES.items():
        with torch.inference_mode():
            assert lookup(dotted)() is (mode == "inference"), dotted
        assert lookup(dotted)() is (mode == "grad"), dotted
    x = torch.ones(1, requires_grad=True)
    for dotted in K.NO_GRAD_CONTEXTS:
        with lookup(dotted)():
            assert not (x * 2).requires_grad, dotted
    # every torch.optim optimizer is known (fails when torch adds one)
    found = {n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
             and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n != "Optimizer"}
    assert found == set(K.OPTIMIZERS)
    # positional indices of retain_graph / create_graph / inputs
    b = K.BACKWARD_CALLS
    params = list(inspect.signature(torch.Tensor.backward).parameters)[1:]
    assert list(b.tensor_method_args["params"]) == params  # the whole signature: anything else is a TypeError
    for arg, pos in b.tensor_method_args.items():
        if arg != "params":
            assert params[pos] == arg[: -len("_arg")], arg
    for fname, spec in b.functions.items():
        params = list(inspect.signature(lookup(fname)).parameters)
        for arg, pos in spec.items():
            assert params[pos] == {"tensors_arg": params[0]}.get(arg, arg[: -len("_arg")]), (fname, arg)
    assert hasattr(torch.amp.GradScaler, "scale")


def test_numpy_ports_compute_what_numpy_computes():
    """Each numpy function of the port table, called as the port calls its torch twin (the
    keywords renamed), gives numpy's values; the reductions as tensor methods too."""
    torch = _torch()
    import numpy as np

    t = K.NUMPY_TO_TORCH
    a = np.array([[0.25, 1.5, 2.0], [0.5, 0.75, 3.0]], dtype=np.float32)
    b = a[::-1].copy()
    for np_name, torch_name in t.functions.items():
        args = {"where": (a > 1, a, b), "maximum": (a, b), "minimum": (a, b), "power": (a, 2)}.get(np_name, (a,))
        kwargs = {"clip": {"a_min": 0.5, "a_max": 2.0}, "sum": {"axis": 1, "keepdims": True}}.get(np_name, {})
        want = getattr(np, np_name)(*args, **kwargs)
        got = getattr(torch, torch_name)(*(torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in args),
                                         **{t.keywords.get(k, k): v for k, v in kwargs.items()})
        assert np.allclose(got.numpy(), want), np_name
    for name in t.reductions:
        assert np.allclose(getattr(torch.from_numpy(a), name)(dim=0).numpy(), getattr(a, name)(axis=0)), name
    assert t.leave_torch <= set(dir(torch.Tensor)) and all(hasattr(torch, n) for n in t.back_to_torch)


def test_module_table_matches_torch_nn():
    torch = _torch()
    import inspect
    nn = torch.nn
    classes = {n for n in dir(nn) if isinstance(getattr(nn, n), type) and issubclass(getattr(nn, n), nn.Module)}
    classes.add("DistributedDataParallel")
    table = set(K._modules())
    assert classes - {"Container"} <= table, sorted(classes - table)  # fails when torch adds a module
    for name, m in K._modules().items():
        cls = getattr(nn, name, None) or getattr(nn.parallel, name)
        assert m.bases == tuple(b.__name__ for b in cls.__mro__[1:] if issubclass(b, nn.Module) and b is not nn.Module)
        if m.inplace_arg:
            params = list(inspect.signature(cls.__init__).parameters)[1:]
            assert params[m.inplace_pos] == m.inplace_arg, name
            assert K.resolve(m.inplace_op, ["tensor"], method=False).inplace, name
        if m.renorm_arg:  # given, each call changes the weight in place (its version moves)
            params = list(inspect.signature(cls.__init__).parameters)[1:]
            assert params[m.renorm_pos] == m.renorm_arg, name
            layer = cls(5, 3, **{m.renorm_arg: 100.0})
            before = layer.weight._version
            layer(torch.tensor([[0, 1]]))  # a bag of two for EmbeddingBag
            assert layer.weight._version > before, name


def test_layer_geometry_matches_torch():
    """The constructor parameters the geometry table names are torch's, in torch's order, and
    the spatial sizes the engine works out from them are those the layers return."""
    torch = _torch()
    import inspect

    from gradguard.engine.shapes import geometry, spatial
    from gradguard.engine.values import Const, Tup
    for cls_name, (_, _, params) in K.LAYER_GEOMETRY.items():
        signature = list(inspect.signature(getattr(torch.nn, cls_name).__init__).parameters)[1:]
        assert signature[:len(params)] == list(params), cls_name

    def value(v):
        return frozenset({Tup(tuple(value(i) for i in v))}) if isinstance(v, tuple) else frozenset({Const(v)})

    cases = [("Conv2d", (3, 4, 3), {"padding": 1}), ("Conv2d", (3, 4, (3, 5)), {"stride": 2, "dilation": (1, 2)}),
             ("Conv1d", (3, 4, 5), {"padding": "same"}), ("Conv3d", (3, 2, 3), {}),
             ("ConvTranspose2d", (3, 4, 2), {"stride": 2}),
             ("ConvTranspose1d", (3, 4, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
             ("MaxPool2d", (2,), {}), ("MaxPool1d", (3, 2, 1), {}), ("AvgPool2d", (3,), {"stride": 2, "padding": 1}),
             ("AvgPool2d", (3, 2, 0, False), {}), ("MaxPool2d", (2,), {"ceil_mode": False}),
             ("AdaptiveAvgPool2d", ((None, 3),), {}), ("AdaptiveMaxPool1d", (5,), {})]
    for cls_name, args, kwargs in cases:
        layer = getattr(torch.nn, cls_name)(*args, **kwargs)
        rank = K.LAYER_GEOMETRY[cls_name][1]
        x = torch.zeros((1, 3) + (17, 12, 9)[:rank])
        geo = geometry(cls_name, [value(a) for a in args], {k: value(v) for k, v in kwargs.items()})
        assert spatial(geo, tuple(x.shape[2:])) == tuple(layer(x).shape[2:]), (cls_name, args, kwargs)
    assert geometry("AvgPool2d", [value(3), value(2), value(0), value(True)], {}) is None  # ceil_mode, by position
    assert geometry("MaxPool1d", [value(3)], {"ceil_mode": frozenset()}) is None  # not known


def test_matmul_shapes_match_torch():
    """The shape the engine gives a product (`x @ w`, `torch.mm`, `bmm`, `mv`, `dot`) is torch's,
    for each op the table names and each rank torch accepts."""
    torch = _torch()
    from gradguard.engine.shapes import matmul
    pairs = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((3,), (5, 3, 4)),
             ((5, 2, 3), (5, 3, 4)), ((1, 2, 3), (6, 3, 4)), ((7, 1, 2, 3), (6, 3, 4))]
    for a, b in pairs:
        assert matmul(a, b) == tuple((torch.zeros(a) @ torch.zeros(b)).shape), (a, b)
    for name in K.MATMUL_SHAPE_OPS:
        a, b = {"mm": ((2, 3), (3, 4)), "bmm": ((5, 2, 3), (5, 3, 4)), "mv": ((2, 3), (3,)),
                "dot": ((3,), (3,)), "matmul": ((5, 2, 3), (3, 4))}[name]
        assert matmul(a, b) == tuple(getattr(torch, name)(torch.zeros(a), torch.zeros(b)).shape), name


def test_shape_methods_and_ranges_match_torch():
    """The shapes the engine gives `squeeze(dim)`, `transpose`, `permute`, `outer`, `multinomial`,
    `scaled_dot_product_attention`, the pieces of `split` and `chunk`, `arange` and `linspace` are torch's."""
    torch = _torch()
    from gradguard.engine.shapes import Shapes
    from gradguard.engine.values import Tensor, Tup, const
    x = torch.zeros(4, 1, 6)
    cases = [("squeeze", (-1,)), ("squeeze", (1,)), ("squeeze", (-2,)), ("transpose", (0, 2)), ("swapaxes", (-1, 0)),
             ("permute", (2, 0, 1)), ("permute", ((1, 2, 0),))]
    for name, args in cases:
        vals = [frozenset({Tup(tuple(const(i) for i in a))}) if isinstance(a, tuple) else const(a) for a in args]
        got = Shapes.method_shape(None, name, Tensor(shape=(4, 1, 6)), vals, {})
        assert got == tuple(getattr(x, name)(*args).shape), (name, args)
    F = torch.nn.functional
    for fn, name, shapes, extra in [(torch.outer, "outer", [(3,), (5,)], {}),
                                    (torch.multinomial, "multinomial", [(4, 9)], {"num_samples": 2}),
                                    (F.scaled_dot_product_attention, "scaled_dot_product_attention",
                                     [(2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6)], {})]:
        info = K.resolve(name, ["tensor"] * len(shapes), tuple(extra), method=False)
        tensors = [p for p in info.params if p in info.tensor_params][:len(shapes)]
        bound = {p: frozenset({Tensor(shape=s)}) for p, s in zip(tensors, shapes)}
        bound.update((k, const(v)) for k, v in extra.items())
        assert Shapes.op_shape(None, info, bound, None) == tuple(fn(*map(torch.rand, shapes), **extra).shape), name
    from gradguard.engine.shapes import pieces
    for name, size, dim in [("split", 8, -1), ("split", 5, 2), ("split", (2, 4, 10), -1), ("chunk", 3, -1),
                            ("chunk", 4, 0), ("chunk", 5, 1)]:
        given = frozenset({Tup(tuple(map(const, size)))}) if isinstance(size, tuple) else const(size)
        got = pieces((4, 6, 16), name, {"split_size" if name == "split" else "chunks": given, "dim": const(dim)})
        assert got == [tuple(p.shape) for p in getattr(torch.zeros(4, 6, 16), name)(size, dim)], (name, size, dim)
    for last, args in [("arange", (10,)), ("arange", (2, 10, 3)), ("arange", (5, 1, -2)), ("linspace", (0, 1, 7)),
                       ("randperm", (6,))]:
        got = Shapes.factory_shape(None, last, [const(a) for a in args], {}, None)
        assert got == tuple(getattr(torch, last)(*args).shape), (last, args)


def test_factory_dtypes_match_torch():
    """The dtype the engine states for a factory called without `dtype` is the one torch gives."""
    torch = _torch()
    for name in K.DEFAULT_FLOAT_FACTORIES:
        assert getattr(torch, name)(2, 3).dtype == torch.float32, name
    for name, dtype in K.TYPED_FACTORIES.items():
        assert getattr(torch, name)([1, 2]).dtype == getattr(torch, dtype), name


def test_factories_not_sharing_input_refuse_a_tensor():
    """A factory left out of `shares_input` never hands back a tensor it was given (or one
    sharing its autograd state): given a tensor, it raises; the engine may take what it returns as fresh."""
    torch = _torch()
    t = torch.ones(3, requires_grad=True)
    for name in ("from_numpy", "frombuffer"):
        assert name in K.FACTORIES and name not in K.FACTORIES_SHARING_INPUT
        with pytest.raises((TypeError, ValueError)):  # not an ndarray; no buffer protocol
            getattr(torch, name)(t, dtype=torch.float32) if name == "frombuffer" else getattr(torch, name)(t)
    assert torch.as_tensor(t) is t and torch.asarray(t) is t


def test_factories_on_cpu_ignore_the_default_device():
    torch, np = _torch(), pytest.importorskip("numpy")
    made = {"from_numpy": lambda: torch.from_numpy(np.ones(3)),
            "frombuffer": lambda: torch.frombuffer(bytearray(8), dtype=torch.float32)}
    assert set(made) == K.FACTORIES_ON_CPU
    torch.set_default_device("meta")
    try:
        assert all(f().device.type == "cpu" for f in made.values())
        assert torch.zeros(1).device.type == "meta"  # (the default device is in force)
    finally:
        torch.set_default_device(None)


def test_like_factories_take_their_inputs_shape_and_device():
    torch = _torch()
    x = torch.ones(2, 3)
    like = sorted(name for name, how in K.FACTORY_SHAPES.items() if how == "like")
    assert "randint_like" in like
    torch.set_default_device("meta")
    try:
        for name in like:
            extra = (5,) if name in ("full_like", "randint_like") else ()
            made = getattr(torch, name)(x, *extra)
            assert made.device.type == "cpu" and made.shape == x.shape, name
    finally:
        torch.set_default_device(None)

def test_numpy_ufuncs_are_numpys_and_each_converts_its_operands():
    """The table's ufuncs are numpy's own, and each refuses a tensor that requires grad, alone
    or in a list, as GG005 predicts."""
    torch = _torch()
    import numpy as np

    listed = {name.split(".", 1)[1] for name in K.TO_NUMPY.functions} & set(dir(np))
    ufuncs = {n for n in dir(np) if isinstance(getattr(np, n), np.ufunc)}
    assert ufuncs <= listed
    t = torch.ones(2, requires_grad=True)
    for name in sorted(ufuncs):
        f = getattr(np, name)
        for operand in (t, [t[0] * 2]):
            with pytest.raises(RuntimeError, match="Can't call numpy"):
                f(*[operand] * f.nin)


def test_numpy_functions_convert_a_tensor_given_first():
    """Each numpy function of the table (not a ufunc) refuses a tensor that requires grad as its
    first argument, alone, with an axis or in a list, as GG005 predicts."""
    torch = _torch()
    import functools
    import warnings

    import numpy as np

    t = torch.ones(2, 3, requires_grad=True)
    for dotted in sorted(K.TO_NUMPY.functions):
        f = functools.reduce(getattr, dotted.split(".")[1:], np)  # `numpy.linalg.norm` too
        if isinstance(f, np.ufunc):
            continue
        messages = []
        for args in ((t,), (t, 0), ([t, t],)):  # (`np.concatenate([a, b])`: a list of them)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    f(*args)
                except Exception as e:  # noqa: BLE001 - the message says which error it is
                    messages.append(str(e))
        assert any("Can't call numpy" in m for m in messages), dotted


def test_numpy_arrays_match_numpy():
    """Each numpy factory of the table, called as code calls it, gives the shape and dtype the
    engine states; element-wise functions keep them; torch's conversions carry them over."""
    torch = _torch()
    import numpy as np

    from gradguard.engine.arrays import call_numpy, tensor_from_array
    from gradguard.engine.values import Array, Const, Ref, Tup

    def value(v):
        return frozenset({Tup(tuple(value(i) for i in v))}) if isinstance(v, tuple) else frozenset({Const(v)})

    t = K.NUMPY_ARRAYS
    for name, where in t.sizes.items():
        fn = np
        for part in name.split("."):
            fn = getattr(fn, part, None) or getattr(np.random.default_rng(0), part)  # `integers`: a Generator's
        args = (2, 3) if where == "each" else (0, 5)[:where] + ((2, 3),) if where else ((2, 3),)
        args = args + (1.5,) if name == "full" else args
        got = call_numpy(name, [value(a) for a in args], {})
        (array,) = tuple(got)
        made = fn(*args)
        assert (array.shape, array.dtype) == (made.shape, str(made.dtype)), name
    for name in t.generators:
        assert call_numpy(name, [value(0)], {}) == frozenset({Ref("numpy.random")}), name
        generator = getattr(np.random, name.split(".")[-1])(0)
        assert all(hasattr(generator, n.split(".")[-1]) for n in t.sizes if n.startswith("random.")
                   and n not in ("random.randint", "random.rand", "random.randn", "random.integers")), name
    for name in ("linspace", "arange"):
        args = (0.0, 1.0, 7) if name == "linspace" else (2, 11, 3)
        (array,) = tuple(call_numpy(name, [value(a) for a in args], {}))
        made = getattr(np, name)(*args)
        assert (array.shape, array.dtype) == (made.shape, str(made.dtype)), name
    x = np.ones((2, 3), dtype=np.float32)
    (array,) = tuple(call_numpy("zeros", [value((2, 3))], {"dtype": value("float32")}))
    for name in t.elementwise:
        if hasattr(np, name):
            assert getattr(np, name)(x).shape == x.shape and getattr(np, name)(x).dtype == x.dtype, name
    ints = Array((4,), "int64")
    assert call_numpy("sqrt", [frozenset({ints})], {}) == frozenset({Array((4,), None)})  # float64, not int64
    assert tuple(call_numpy("full", [value((2,)), value(1)], {}))[0].dtype == str(np.full((2,), 1).dtype)
    assert call_numpy("random.uniform", [value(-1.0), value(1.0)], {}) is None  # a Python float
    (drawn,) = tuple(call_numpy("random.choice", [value(5), value((2, 3))], {}))  # indices: an ndarray
    made = np.random.choice(5, (2, 3))
    assert (drawn.shape, drawn.dtype, drawn.ndarray) == (made.shape, str(made.dtype), True)
    assert call_numpy("random.choice", [value(5)], {}) is None and np.ndim(np.random.choice(5)) == 0  # one item
    for name in t.keep_dtype | t.float32:
        made = getattr(torch, name)(x)
        assert (tuple(made.shape), str(made.dtype).split(".")[-1]) == tensor_from_array(name, array), name


# --------------------------------------------------------------------------- generator

@pytest.mark.slow
def test_generator_reproduces_shipped_ops_json(tmp_path):
    """Re-runs scripts/gen_torch_knowledge.py with the installed torch.  The one slow
    test: ~2-3 s in-process (torchgen parses native_functions.yaml and derivatives.yaml)."""
    torch = _torch()
    pytest.importorskip("torchgen", reason="torchgen ships inside the torch wheel")
    with open(os.path.join(KNOWLEDGE_DIR, "ops.json"), encoding="utf-8") as fh:
        shipped = fh.read()
    if json.loads(shipped)["torch"] != torch.__version__.split("+")[0]:
        pytest.skip(f"ops.json was generated from torch {json.loads(shipped)['torch']}, installed {torch.__version__}")
    spec = importlib.util.spec_from_file_location("gen_torch_knowledge",
                                                  os.path.join(ROOT, "scripts", "gen_torch_knowledge.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.main(["-o", str(tmp_path)]) == 0
    assert (tmp_path / "ops.json").read_text(encoding="utf-8") == shipped, \
        "ops.json is stale: run scripts/gen_torch_knowledge.py"


def test_python_constants_are_pythons():
    import importlib

    for dotted, value in K.PYTHON_CONSTANTS.items():
        module, _, name = dotted.rpartition(".")
        assert getattr(importlib.import_module(module), name) == value, dotted


def test_python_wrapper_defaults_choose_the_overload_torch_runs():
    """`torch.norm(x, dim=1)` and `x.norm(dim=1)` go through Python wrappers whose `p` has a
    default: they run norm.ScalarOpt_dim and reduce over `dim`, as torch computes."""
    torch = _torch()
    x = torch.ones(4, 3)
    assert K.resolve("norm", ("tensor",), ("dim",), method=False).key == "norm.ScalarOpt_dim"
    assert K.resolve("norm", (), ("dim",), method=True).key == "norm.ScalarOpt_dim"
    assert K.resolve("norm", ("tensor",), (), method=False).key == "norm.Scalar"
    assert torch.norm(x, dim=1).shape == x.norm(dim=1).shape == (4,)


def test_inplace_reshapes_change_the_tensor_like_their_out_of_place_op():
    torch = _torch()
    calls = {"unsqueeze_": (0,), "squeeze_": (), "t_": (), "transpose_": (0, 1), "swapdims_": (0, 1),
             "swapaxes_": (0, 1), "resize_": (6,), "as_strided_": ((3, 2), (2, 1))}
    assert set(calls) | {"resize_as_", "set_"} == K.INPLACE_RESHAPES
    for name, args in calls.items():
        x = torch.zeros(2, 1, 3) if name == "squeeze_" else torch.zeros(2, 3)
        before = x.shape
        same = getattr(x, name)(*args)
        assert same is x and x.shape != before, name
        base = getattr(torch.zeros(before), name[:-1], None)
        assert base is None or base(*args).shape == x.shape, name
    assert hasattr(torch.Tensor, "resize_as_") and hasattr(torch.Tensor, "set_")


def test_autocast_lower_precision_ops_cast_their_inputs():
    """Each op of the autocast table gives a bfloat16 result from float32 inputs under CPU
    bfloat16 autocast: it ran on cast copies (what it saves for backward)."""
    torch = _torch()
    import torch.nn.functional as F

    a, m = torch.randn(2, 3, 3), torch.randn(3, 3)
    image, signal, volume = torch.randn(1, 2, 5, 5), torch.randn(1, 2, 5), torch.randn(1, 2, 5, 5, 5)
    calls = {
        "__matmul__": lambda: a.__matmul__(a), "__rmatmul__": lambda: a.__rmatmul__(a), "matmul": lambda: a @ a,
        "addbmm": lambda: torch.addbmm(m, a, a), "addmm": lambda: torch.addmm(m, m, m),
        "baddbmm": lambda: torch.baddbmm(a, a, a), "bmm": lambda: torch.bmm(a, a), "mm": lambda: m.mm(m),
        "conv1d": lambda: F.conv1d(signal, torch.randn(2, 2, 3)), "conv2d": lambda: F.conv2d(image, torch.randn(2, 2, 3, 3)),
        "conv3d": lambda: F.conv3d(volume, torch.randn(2, 2, 3, 3, 3)),
        "conv_transpose1d": lambda: F.conv_transpose1d(signal, torch.randn(2, 2, 3)),
        "conv_transpose2d": lambda: F.conv_transpose2d(image, torch.randn(2, 2, 3, 3)),
        "conv_transpose3d": lambda: F.conv_transpose3d(volume, torch.randn(2, 2, 3, 3, 3)),
        "einsum": lambda: torch.einsum("ij,jk->ik", m, m), "linear": lambda: F.linear(m, m),
        "prelu": lambda: F.prelu(m, torch.tensor([0.1])),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(a, a, a),
        "tensordot": lambda: torch.tensordot(m, m, 1),
    }
    assert set(calls) == set(K.AUTOCAST_LOWER_PRECISION)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, call in calls.items():
            assert call().dtype == torch.bfloat16, name
