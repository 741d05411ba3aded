# expect: freed_graph
# shape: a functools.cached_property computes a tensor with a graph once; every later step reuses its freed graph
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
    def adj(self):
        return torch.softmax(self.adj_logits, dim=1)

    def forward(self, x):
        return self.adj @ self.lin(x)


net = GraphConv(5, 4)
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
x = torch.randn(5, 4)
target = torch.randn(5, 4)
for epoch in range(3):
    out = net(x)
    loss = (out - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
    print(epoch, loss.item())
