# expect: freed_graph
# shape: an LSTMCell keeps its (h, c) state on self between windows, never detached
import torch
import torch.nn as nn


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(3, 8)
        self.head = nn.Linear(8, 3)
        self.state = None

    def forward(self, x_t):
        self.state = self.cell(x_t, self.state)
        return self.head(self.state[0])


model = Forecaster()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
series = torch.randn(12, 4, 3)
for start in range(0, 8, 4):
    preds = torch.stack([model(series[t]) for t in range(start, start + 4)])
    loss = (preds - series[start + 1:start + 5]).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
