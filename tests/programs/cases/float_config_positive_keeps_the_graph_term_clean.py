# expect: clean
# shape: a REINFORCE loss whose log-probabilities went through torch.tensor (no graph); the only term with a graph is added under `if cfg.entropy_coef > 0:`, and the config's float is 0.01
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.distributions import Categorical


@dataclass
class Config:
    entropy_coef: float = 0.01
    gamma: float = 0.99


cfg = Config()
policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
log_probs, entropies, rewards = [], [], []
for t in range(5):
    dist = Categorical(logits=policy(torch.randn(4)))
    action = dist.sample()
    log_probs.append(dist.log_prob(action))
    entropies.append(dist.entropy())
    rewards.append(float(action) * cfg.gamma)
returns = torch.tensor(rewards)
loss = -(torch.tensor(log_probs) * returns).mean()
if cfg.entropy_coef > 0:
    loss = loss - cfg.entropy_coef * torch.stack(entropies).mean()
opt.zero_grad()
loss.backward()
opt.step()
