# expect: clean
# shape: the twin of variable_detaches_its_argument_crash.py whose generator steps make a new fake each time: the graph they backpropagate saved the weights as they are now
import torch
import torch.nn as nn
from torch.autograd import Variable

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
netD = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
real = torch.randn(16, 4)


def gradient_penalty(netD, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interpolates = alpha * real + (1 - alpha) * fake
    interpolates = Variable(interpolates, requires_grad=True)
    out = netD(interpolates)
    grads = torch.autograd.grad(out.sum(), interpolates, create_graph=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


fake = netG(torch.randn(16, 4))
optD.zero_grad()
loss_d = netD(fake.detach()).mean() - netD(real).mean()
loss_d.backward()
gradient_penalty(netD, real, fake).backward()
optD.step()
for g_step in range(2):
    optG.zero_grad()
    fake = netG(torch.randn(16, 4))
    errG = -netD(fake).mean()
    errG.backward(retain_graph=True)
    optG.step()
