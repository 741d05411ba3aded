# expect: grad_unused
# shape: a neural potential computes per-atom energies of a batch of molecules at once, then asks for each molecule's forces as the gradient of its energy with respect to its slice of the coordinates: the slice is a new view the energy never used
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
sizes = [3, 5]
x = torch.randn(sum(sizes), 3).requires_grad_()
atomic = net(x).squeeze(-1)
loss, start = 0.0, 0
for n in sizes:
    end = start + n
    energy = atomic[start:end].sum()
    forces = -torch.autograd.grad(energy, x[start:end], create_graph=True)[0]  # raises
    loss = loss + forces.pow(2).mean()
    start = end
opt.zero_grad()
loss.backward()
opt.step()
