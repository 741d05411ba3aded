# expect: clean
# shape: WGAN weight clipping through .data after the critic's step
import torch
import torch.nn as nn

critic = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
for step in range(3):
    loss = -critic(torch.randn(5, 4)).mean() + critic(torch.randn(5, 4)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    for p in critic.parameters():
        p.data.clamp_(-0.01, 0.01)
