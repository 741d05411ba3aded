# expect: nonscalar_backward
# source: https://github.com/linkedin/Liger-Kernel/pull/435
"""Correctness test for a fused cross-entropy autograd function (gradient
computed in the forward pass, as in a kernel library) against torch's
CrossEntropyLoss, for the 'mean', 'sum' and 'none' reductions."""
import torch


class FusedCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, _input, target, ignore_index=-100, reduction="mean"):
        logits = _input.detach().float()
        valid = target != ignore_index
        n_non_ignore = valid.sum().clamp(min=1)
        lse = torch.logsumexp(logits, dim=-1)
        safe_t = torch.where(valid, target, torch.zeros_like(target))
        loss_1d = (lse - logits.gather(1, safe_t[:, None]).squeeze(1)) * valid
        grad = torch.softmax(logits, dim=-1)
        grad[torch.arange(len(target)), safe_t] -= 1.0
        grad *= valid[:, None]
        if reduction == "mean":
            grad /= n_non_ignore
            loss = loss_1d.sum() / n_non_ignore
        elif reduction == "sum":
            loss = loss_1d.sum()
        else:
            loss = loss_1d
        ctx.save_for_backward(grad.to(_input.dtype))
        ctx.reduction = reduction
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (grad_input,) = ctx.saved_tensors
        if ctx.reduction == "none":
            grad_input = grad_input * grad_output[:, None]
        else:
            grad_input = grad_input * grad_output
        return grad_input, None, None, None


def _test_correctness_once(target_ce, B, T, V, reduction, scalar, dtype, atol, rtol):
    torch.manual_seed(0)
    _tensor = torch.randn(B * T, V, dtype=dtype) * scalar
    _input = _tensor.detach().clone().requires_grad_(True)
    _input2 = _tensor.detach().clone().requires_grad_(True)
    target = torch.randint(0, V, (B * T,))

    output = target_ce(_input, target)
    output2 = FusedCrossEntropyFunction.apply(_input2, target, -100, reduction)
    assert torch.allclose(output, output2, atol=atol, rtol=rtol)

    output.backward()  # raises
    output2.backward()
    assert torch.allclose(_input.grad, _input2.grad, atol=atol, rtol=rtol)
    print(f"reduction={reduction!r}: ok, loss shape {tuple(output2.shape)}")


if __name__ == "__main__":
    for reduction in ["mean", "sum", "none"]:
        ce = torch.nn.CrossEntropyLoss(reduction=reduction)
        _test_correctness_once(ce, B=2, T=8, V=32, reduction=reduction, scalar=1.0,
                               dtype=torch.float32, atol=1e-5, rtol=1e-4)
