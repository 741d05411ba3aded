# expect: clean
# shape: the same config-named model and loss, the features computed in each iteration: each backward has a graph of its own
import torch
import torch.nn as nn

CONFIG = {"model": "Encoder", "loss": "l2_loss", "steps": 3}


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def l2_loss(pred, target):
    return (pred - target).pow(2).mean()


model = globals()[CONFIG["model"]](4)
loss_fn = globals()[CONFIG["loss"]]
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 4)
for step in range(CONFIG["steps"]):
    loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    loss.backward()
