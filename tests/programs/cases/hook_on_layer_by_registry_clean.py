# expect: clean
# shape: the same tracker, the previous step's features detached before the next step compares with them
import torch
from torch import nn


def get_layer(model, path):
    layer = model
    for key in path:
        layer = layer._modules[key]
    return layer


class FeatureTracker:
    def __init__(self, model, path):
        self.features = None
        get_layer(model, path).register_forward_hook(self.keep)

    def keep(self, module, inputs, output):
        self.features = output


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x))


def train(steps=3):
    torch.manual_seed(0)
    model = Net()
    tracker = FeatureTracker(model, ["body", "1"])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    previous = None
    for _ in range(steps):
        x, y = torch.randn(4, 6), torch.randn(4, 2)
        loss = (model(x) - y).pow(2).mean()
        if previous is not None:
            loss = loss + 0.1 * (tracker.features - previous).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        previous = tracker.features.detach()
    return loss.item()


if __name__ == "__main__":
    print(train())
