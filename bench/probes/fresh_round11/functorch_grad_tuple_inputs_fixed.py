# expect: clean
# source: https://github.com/pytorch/functorch/issues/5
"""A small functorch-style `grad` transform built on torch.autograd.grad: it
differentiates a scalar function with respect to a (possibly nested) tuple of
input tensors and returns gradients with the same structure."""
import torch

torch.manual_seed(0)


def _flatten(inps):
    if isinstance(inps, (tuple, list)):
        out = []
        for x in inps:
            out.extend(_flatten(x))
        return out
    return [inps]


def _unflatten(flat, like):
    if isinstance(like, (tuple, list)):
        out, i = [], 0
        for x in like:
            n = len(_flatten(x))
            out.append(_unflatten(flat[i:i + n], x))
            i += n
        return type(like)(out)
    return flat[0]


def grad(f):
    def wrapper(*args):
        flat = [a.detach().requires_grad_(True) for a in _flatten(args[0])]
        diff_args = _unflatten(flat, args[0])
        output = f(diff_args, *args[1:])
        flat_grads = torch.autograd.grad(output, flat, create_graph=True, allow_unused=True)
        flat_grads = [torch.zeros_like(a) if g is None else g for g, a in zip(flat_grads, flat)]
        return _unflatten(list(flat_grads), args[0])
    return wrapper


def g(x):
    return (x[0] ** 2.0 + x[1].sin()).sum()


def f(x):
    return (x[0] ** 2.0).sum()


inps = (torch.randn(3), torch.randn(3))
print("grad g:", grad(g)(inps))
fx_graph = grad(f)(inps)
print("grad f:", fx_graph)
