# expect: inplace_version
# shape: a critic whose forward calls `super().forward(...)` of its base class; the actor loss goes through it, the critic's optimizer steps before the actor's backward
import torch
import torch.nn as nn


class Mlp(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.ReLU(), nn.Linear(sizes[1], 1))

    def forward(self, x):
        return self.layers(x)


class Critic(Mlp):
    def forward(self, obs, action):
        return super().forward(torch.cat([obs, action], dim=-1))


actor = nn.Sequential(nn.Linear(4, 2), nn.Tanh())
critic = Critic((6, 16))
actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3)

for step in range(2):
    obs, taken, target = torch.randn(8, 4), torch.randn(8, 2), torch.randn(8, 1)
    actor_loss = -critic(obs, actor(obs)).mean()
    critic_loss = (critic(obs, taken) - target).pow(2).mean()
    critic_opt.zero_grad()
    critic_loss.backward()
    critic_opt.step()
    actor_opt.zero_grad()
    actor_loss.backward()  # raises
    actor_opt.step()
