# expect: clean
# shape: a checkpoint helper decorated `@torch.no_grad()` converts the model to half precision and back: its parameters stay ordinary tensors, and training goes on
import torch
import torch.nn as nn
import torch.nn.functional as F


class Trainer:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 1))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.checkpoints = []

    @torch.no_grad()
    def save_half(self):
        self.model.half()
        self.checkpoints.append({k: v.clone() for k, v in self.model.state_dict().items()})
        self.model.float()

    def step(self, x, y):
        loss = F.mse_loss(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()


torch.manual_seed(0)
trainer = Trainer()
x, y = torch.randn(4, 8), torch.randn(4, 1)
for epoch in range(3):
    trainer.step(x, y)
    trainer.save_half()
