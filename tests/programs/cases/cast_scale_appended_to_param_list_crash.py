# expect: nonleaf_optimizer
# shape: a calibration head keeps a temperature made as `nn.Parameter(...).to(torch.float64)`, a cast copy and so not a leaf (nor registered); the trainer optimizes `list(model.parameters()) + [model.temperature]`, a list whose items are not known one by one but which surely holds that tensor
import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.float64


class CalibratedHead(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.fc = nn.Linear(dim, classes).to(DTYPE)
        self.temperature = nn.Parameter(torch.ones(1)).to(DTYPE)

    def forward(self, x):
        return self.fc(x) / self.temperature


class Trainer:
    def __init__(self, model, lr=1e-2):
        self.model = model
        params = list(model.parameters()) + [model.temperature]
        self.opt = torch.optim.Adam(params, lr=lr)  # raises

    def step(self, x, y):
        self.opt.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.item()


model = CalibratedHead(8, 3)
trainer = Trainer(model)
x, y = torch.randn(32, 8, dtype=DTYPE), torch.randint(0, 3, (32,))
for epoch in range(3):
    print(trainer.step(x, y))
