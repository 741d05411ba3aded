# expect: clean
# shape: a functools.cached_property holds a constant mask (no graph); the softmax is computed on every call
import functools
import torch
import torch.nn as nn

torch.manual_seed(0)


class GraphConv(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.adj_logits = nn.Parameter(torch.randn(n, n))
        self.lin = nn.Linear(d, d)

    @functools.cached_property
    def adj_mask(self):
        # constant mask, built from data only (no grad)
        return (torch.rand(self.adj_logits.shape[0], self.adj_logits.shape[0]) > 0.3).float()

    def forward(self, x):
        adj = torch.softmax(self.adj_logits.masked_fill(self.adj_mask == 0, -1e4), dim=1)
        return adj @ self.lin(x)


net = GraphConv(5, 4)
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
x = torch.randn(5, 4)
target = torch.randn(5, 4)
for epoch in range(3):
    out = net(x)
    loss = (out - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(epoch, loss.item())
