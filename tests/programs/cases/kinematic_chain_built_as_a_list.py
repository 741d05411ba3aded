# expect: clean
# shape: the same kinematic chain built as a list of joint transforms and stacked once: nothing a matmul saved is written afterwards
import torch
import torch.nn as nn

parents = torch.tensor([0, 0, 1, 2])
pose = nn.Parameter(torch.randn(1, 4, 3, 3))
optimizer = torch.optim.Adam([pose], lr=0.01)
local = torch.tanh(pose)
chain = [local[:, 0]]
for i in range(1, 4):
    chain.append(torch.matmul(chain[int(parents[i])], local[:, i]))
G = torch.stack(chain, dim=1)
loss = G.pow(2).mean()
optimizer.zero_grad()
loss.backward()
optimizer.step()
