# expect: clean
# shape: REINFORCE with a fresh log-probs list per episode; the log-prob is adjusted in place (SAC's squashing correction), which no backward needs
from torch.distributions import Categorical, Normal
import torch
import torch.nn as nn

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for episode in range(3):
    log_probs = []
    for t in range(4):
        obs = torch.randn(1, 4)
        dist = Categorical(logits=policy(obs))
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
    loss = -torch.cat(log_probs).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

    out = policy(torch.randn(3, 4))
    normal = Normal(out[:, 0], out[:, 1].exp())
    x_t = normal.rsample()
    log_prob = normal.log_prob(x_t)
    log_prob -= torch.log(1 - torch.tanh(x_t).pow(2) + 1e-6)
    actor_loss = (log_prob - x_t).mean()
    opt.zero_grad()
    actor_loss.backward()
    opt.step()
