# expect: freed_graph
# shape: a trainer registers `get_activation(name)`'s inner hook on a submodule; it keeps the activation of the last step and compares the next one with it
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.body(x))


activation = {}


def get_activation(name):
    def hook(model, inp, output):
        activation[name] = output
    return hook


class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.model.body.register_forward_hook(get_activation("body"))
        self.prev = None

    def step(self, x):
        out = self.model(x)
        loss = out.pow(2).mean()
        if self.prev is not None:
            loss = loss + (activation["body"] - self.prev).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()  # raises
        self.opt.step()
        self.prev = activation["body"]
        return loss.item()


def main():
    trainer = Trainer(Net())
    for _ in range(3):
        trainer.step(torch.randn(2, 4))


if __name__ == "__main__":
    main()
