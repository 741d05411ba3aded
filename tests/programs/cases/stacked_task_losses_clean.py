# expect: clean
# shape: the same per-task losses, stacked and averaged over batches and heads: one value, from which backward starts
import random

import torch
from torch import nn


def collect_losses(model, batches):
    losses = []
    for x, y in batches:
        losses.append(nn.functional.mse_loss(model(x), y, reduction="none").mean(0))
    return torch.stack(losses).mean()


def main():
    torch.manual_seed(0)
    random.seed(0)
    model = nn.Linear(5, 3)
    batches = [(torch.randn(4, 5), torch.randn(4, 3)) for _ in range(random.randint(2, 5))]
    loss = collect_losses(model, batches)
    loss.backward()


if __name__ == "__main__":
    main()
