# expect: freed_graph
# shape: actor and critic heads on one trunk, two backward calls without retain_graph
import torch
import torch.nn as nn

trunk = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
actor = nn.Linear(16, 2)
critic = nn.Linear(16, 1)
params = list(trunk.parameters()) + list(actor.parameters()) + list(critic.parameters())
opt = torch.optim.Adam(params)
feat = trunk(torch.randn(5, 4))
actor_loss = -torch.log_softmax(actor(feat), dim=1)[:, 0].mean()
critic_loss = critic(feat).pow(2).mean()
opt.zero_grad()
actor_loss.backward()
critic_loss.backward()  # raises
opt.step()
