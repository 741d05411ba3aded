# expect: nonscalar_backward
# shape: the same weights made a row in place with `unsqueeze_(0)`: times a (4, 1) parameter they broadcast to (4, 4), and the sum over the batch leaves four elements, which backward cannot start from
import torch


def weighted_loss(weights, scale):
    weights.unsqueeze_(0)
    return (weights * scale).sum(0)


def main():
    torch.manual_seed(0)
    scale = torch.randn(4, 1, requires_grad=True)
    weights = torch.rand(4)
    loss = weighted_loss(weights, scale)
    loss.backward()  # raises
    print(scale.grad.shape)


if __name__ == "__main__":
    main()
