# expect: clean
# shape: the same model with `deque(maxlen=1)`: each append drops the previous frame, so the loss reads only the feature this step computed
from collections import deque

import torch
from torch import nn


class TemporalModel(nn.Module):
    def __init__(self, frames):
        super().__init__()
        self.encoder = nn.Linear(8, 8)
        self.head = nn.Linear(8, 1)
        self.memory = deque(maxlen=frames)

    def forward(self, frame):
        feat = torch.tanh(self.encoder(frame))
        self.memory.append(feat)
        context = torch.stack(list(self.memory)).mean(0)
        return self.head(context)


def train(frames, steps=3):
    torch.manual_seed(0)
    model = TemporalModel(frames)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    train(frames=1)
