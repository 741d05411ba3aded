# expect: inplace_version
# shape: a gated cell that calls torch functions with keyword arguments only (`torch.split(tensor=..., ...)`, `torch.mul(input=..., other=...)`); its gate adds its bias in place to a sigmoid output, which Sigmoid saved
import torch
import torch.nn as nn


class GatedCell(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2 * dim, 2 * dim) * 0.1)
        self.bias = nn.Parameter(torch.zeros(2 * dim))
        self.dim = dim

    def gates(self, x, h):
        xh = torch.cat(tensors=[x, h], dim=-1)
        value = torch.sigmoid(input=torch.matmul(input=xh, other=self.weight))
        value += self.bias
        return value

    def forward(self, x, h):
        r, u = torch.split(tensor=self.gates(x, h), split_size_or_sections=self.dim, dim=-1)
        return torch.mul(input=u, other=h) + (1 - u) * torch.tanh(torch.mul(input=r, other=x))


cell = GatedCell(4)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
x, h = torch.randn(3, 4), torch.zeros(3, 4)
for step in range(3):
    h = cell(x, h.detach())
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
