# expect: nonscalar_backward
# shape: manual minibatching indexes the data with slices of a random permutation; the squared error of the three-target regression is backpropagated without reducing it
import torch
import torch.nn as nn

torch.manual_seed(0)
x, y = torch.randn(256, 10), torch.randn(256, 3)
model = nn.Linear(10, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
perm = torch.randperm(256)
for i in range(0, 256, 64):
    idx = perm[i:i + 64]
    err = (model(x[idx]) - y[idx]) ** 2
    opt.zero_grad()
    err.backward()  # raises
    opt.step()
