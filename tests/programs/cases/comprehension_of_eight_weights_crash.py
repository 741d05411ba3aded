# expect: grad_unused
# shape: eight fast weights made by a dict comprehension (each its own leaf, known one by one); the inner step skips the output layer's weight, and `autograd.grad` over all eight finds that one unused
import torch


def inner_loss(weights, x, skip_last):
    h = x
    layers = list(weights.values())
    for w in layers[:-1] if skip_last else layers:
        h = torch.tanh(h @ w)
    return h.pow(2).mean()


def adapt(x, skip_last, lr=0.1):
    weights = {f"w{i}": torch.randn(4, 4, requires_grad=True) for i in range(8)}
    loss = inner_loss(weights, x, skip_last)
    grads = torch.autograd.grad(loss, list(weights.values()))  # raises
    return {name: w - lr * g for (name, w), g in zip(weights.items(), grads)}


if __name__ == "__main__":
    torch.manual_seed(0)
    fast = adapt(torch.randn(3, 4), skip_last=True)
    print(sorted(fast))
