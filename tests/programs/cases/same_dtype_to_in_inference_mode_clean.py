# expect: clean
# shape: a helper decorated `@torch.inference_mode()` calls `model.to(torch.float32)` on a float32 model: nothing is converted, so its parameters are not inference tensors
import torch
import torch.nn as nn
import torch.nn.functional as F


class Trainer:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 1))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.checkpoints = []

    @torch.inference_mode()
    def save_half(self):
        self.checkpoints.append({k: v.clone() for k, v in self.model.state_dict().items()})
        self.model.to(torch.float32)

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
