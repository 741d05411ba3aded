# expect: clean
# shape: gradient accumulation: backward every step, step and zero_grad every k steps, running loss via .item()
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
accum = 2
running = 0.0
for i in range(6):
    loss = model(torch.randn(3, 4)).pow(2).mean() / accum
    loss.backward()
    running += loss.item()
    if (i + 1) % accum == 0:
        opt.step()
        opt.zero_grad()
