# expect: freed_graph
# shape: gradient accumulation that sums the losses of `accum_steps` batches into one tensor and backpropagates it every `accum_steps` batches of a counted loop, but never resets the sum: the second backward runs through the first one's freed graph
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class TrainArgs:
    steps: int = 12
    accum_steps: int = 3
    lr: float = 0.05


class Trainer:
    def __init__(self, args: TrainArgs):
        self.args = args
        self.model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr)

    def compute_loss(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self.model(x), y) / self.args.accum_steps

    def fit(self, batches):
        running = torch.zeros(())
        for i in range(self.args.steps):
            running = running + self.compute_loss(batches[i % len(batches)])
            if (i + 1) % self.args.accum_steps == 0:
                running.backward()  # raises
                self.optimizer.step()
                self.optimizer.zero_grad()


if __name__ == "__main__":
    torch.manual_seed(0)
    data = [(torch.randn(4, 6), torch.randn(4, 1)) for _ in range(5)]
    Trainer(TrainArgs()).fit(data)
