# expect: freed_graph
# shape: a rollout buffer stores the critic's values with their graph (`self.values.append(value)`); the returns built from them before the update epochs carry that graph, which the first minibatch's backward frees
import torch
import torch.nn as nn


class Buffer:
    def __init__(self):
        self.obs, self.rewards, self.values = [], [], []

    def add(self, obs, reward, value):
        self.obs.append(obs)
        self.rewards.append(reward)
        self.values.append(value)

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
    loss.backward()  # raises
    opt.step()
