# expect: freed_graph
# shape: a config names the model class and the loss function, looked up with globals()[name]; the features are computed once before the loop, so the second iteration's backward goes through the graph the first one freed
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
features = model(x)
for step in range(CONFIG["steps"]):
    loss = loss_fn(features, y)
    optimizer.zero_grad()
    loss.backward()  # raises
