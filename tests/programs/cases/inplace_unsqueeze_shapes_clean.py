# expect: clean
# shape: per-sample weights turned into a column in place with `unsqueeze_(1)`; multiplied with a (4, 1) parameter and summed over the batch, the loss has one element, and backward needs no gradient argument
import torch


def weighted_loss(weights, scale):
    weights.unsqueeze_(1)
    return (weights * scale).sum(0)


def main():
    torch.manual_seed(0)
    scale = torch.randn(4, 1, requires_grad=True)
    weights = torch.rand(4)
    loss = weighted_loss(weights, scale)
    loss.backward()
    print(scale.grad.shape)


if __name__ == "__main__":
    main()
