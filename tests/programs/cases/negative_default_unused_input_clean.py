# expect: clean
# shape: the same objective with the default `sign=1`: the loss reads the labels, and each input has a gradient
import torch


def user_loss(preds, labels, sign=1):
    target = torch.ones_like(preds) if sign < 0 else labels
    return ((preds - target) ** 2).sum()


def gradients(preds, labels):
    preds = preds.clone().requires_grad_(True)
    labels = labels.clone().requires_grad_(True)
    loss = user_loss(preds, labels)
    return torch.autograd.grad(loss, [preds, labels])


if __name__ == "__main__":
    torch.manual_seed(0)
    g = gradients(torch.randn(6), torch.randn(6))
    print(g[0].shape)
