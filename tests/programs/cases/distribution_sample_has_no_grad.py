# expect: no_grad_fn
# shape: the loss is built from a distribution's sample(), which draws without a graph (rsample() keeps one)
import torch
import torch.nn as nn

torch.manual_seed(0)
actor = nn.Linear(3, 2)
opt = torch.optim.SGD(actor.parameters(), lr=0.1)
obs = torch.randn(8, 3)
out = actor(obs)
dist = torch.distributions.Normal(out[:, 0], out[:, 1].exp())
action = dist.sample()
loss = (action ** 2).mean()
opt.zero_grad()
loss.backward()  # raises
opt.step()
