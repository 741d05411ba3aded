# expect: inplace_version
# shape: a kinematic chain fills G joint by joint in place (G[:, i] = G[:, parents[i]] @ local[:, i]); a 0-d tensor index (parents[i]) indexes as a number, so each matmul saved a view of G that a later write modifies
import torch
import torch.nn as nn

parents = torch.tensor([0, 0, 1, 2])
pose = nn.Parameter(torch.randn(1, 4, 3, 3))
optimizer = torch.optim.Adam([pose], lr=0.01)
local = torch.tanh(pose)
G = torch.zeros(1, 4, 3, 3)
G[:, 0] = local[:, 0]
for i in range(1, 4):
    G[:, i] = torch.matmul(G[:, parents[i]], local[:, i])
loss = G.pow(2).mean()
optimizer.zero_grad()
loss.backward()  # raises
optimizer.step()
