# expect: clean
# shape: a layer class derived from nn.Linear computes features once before the loop, detached: each step backpropagates only through the head
import torch
import torch.nn as nn


class Dense(nn.Linear):
    """A linear layer with an optional activation, as potential-energy models write it."""

    def __init__(self, in_features, out_features, activation=None):
        super().__init__(in_features, out_features)
        self.activation = activation

    def forward(self, x):
        y = super().forward(x)
        if self.activation is not None:
            y = self.activation(y)
        return y


torch.manual_seed(0)
encoder = Dense(8, 16, activation=nn.Softplus())
head = nn.Linear(16, 1)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
x = torch.randn(32, 8)
target = torch.randn(32, 1)
features = encoder(x).detach()
for step in range(3):
    opt.zero_grad()
    loss = ((head(features) - target) ** 2).mean()
    loss.backward()
    opt.step()
