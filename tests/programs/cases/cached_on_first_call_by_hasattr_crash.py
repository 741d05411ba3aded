# expect: freed_graph
# shape: a module caches its encoder's output on itself the first time forward runs (`if not hasattr(self, "memory"): self.memory = ...`); every later step backpropagates through that first graph, which the first step's backward freed
import torch
from torch import nn


class MemoryReader(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())
        self.query = nn.Linear(dim, dim)

    def build_memory(self, support):
        return self.encoder(support)

    def forward(self, x, support):
        if not hasattr(self, "memory"):
            self.memory = self.build_memory(support)
        attn = torch.softmax(self.query(x) @ self.memory.t(), dim=-1)
        return attn @ self.memory


def train(steps=3):
    torch.manual_seed(0)
    model = MemoryReader(6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    support = torch.randn(10, 6)
    for _ in range(steps):
        x = torch.randn(4, 6)
        loss = model(x, support).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # raises
        opt.step()


if __name__ == "__main__":
    train()
