# expect: clean
# shape: the Linear layers are frozen by name except the head, over named_modules(): the head stays trainable, so the loss has a graph
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.act(self.fc1(x)))


def freeze_linear_layers(model):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not name.startswith("head"):
            for p in module.parameters():
                p.requires_grad = False


model = Net()
freeze_linear_layers(model)
optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
loss = model(torch.randn(5, 4)).pow(2).mean()
loss.backward()
optimizer.step()
