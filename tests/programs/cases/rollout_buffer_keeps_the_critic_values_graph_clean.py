# expect: clean
# shape: the twin of rollout_buffer_keeps_the_critic_values_graph_crash.py whose buffer stores the values detached: the returns are targets without a graph
import torch
import torch.nn as nn


class Buffer:
    def __init__(self):
        self.obs, self.rewards, self.values = [], [], []

    def add(self, obs, reward, value):
        self.obs.append(obs)
        self.rewards.append(reward)
        self.values.append(value.detach())

    def returns(self, gamma=0.99):
        values = torch.stack(self.values)
        rewards = torch.stack(self.rewards)
        return rewards + gamma * values


critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
buf = Buffer()
for t in range(6):
    obs = torch.randn(4)
    buf.add(obs, torch.randn(1), critic(obs))
ret = buf.returns()
obs = torch.stack(buf.obs)
for epoch in range(3):
    loss = (critic(obs) - ret).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
