# expect: nonscalar_backward
# shape: per-task loss vectors (one value per output head) collected in a loop over batches of a length the program does not fix; stacked and averaged over the batches only, the loss keeps one value per head, and backward cannot start from it
import random

import torch
from torch import nn


def collect_losses(model, batches):
    losses = []
    for x, y in batches:
        losses.append(nn.functional.mse_loss(model(x), y, reduction="none").mean(0))
    return torch.stack(losses).mean(0)


def main():
    torch.manual_seed(0)
    random.seed(0)
    model = nn.Linear(5, 3)
    batches = [(torch.randn(4, 5), torch.randn(4, 3)) for _ in range(random.randint(2, 5))]
    loss = collect_losses(model, batches)
    loss.backward()  # raises


if __name__ == "__main__":
    main()
