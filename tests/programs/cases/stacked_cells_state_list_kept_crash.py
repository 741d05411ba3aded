# expect: freed_graph
# shape: each forward builds a new list of layer states and keeps it on the model; the next
# forward reads the previous list, whose graph the last backward freed
import torch
import torch.nn as nn


class StackedCells(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.cells = nn.ModuleList([nn.GRUCell(width, width) for _ in range(depth)])
        self.state = None

    def reset(self, batch):
        self.state = [torch.zeros(batch, cell.hidden_size) for cell in self.cells]

    def forward(self, x):
        new_state = []
        for cell, h in zip(self.cells, self.state):
            x = cell(x, h)
            new_state.append(x)
        self.state = new_state
        return x


torch.manual_seed(0)
model = StackedCells(4, 2)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model.reset(2)
for step in range(3):
    out = model(torch.randn(2, 4))
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
