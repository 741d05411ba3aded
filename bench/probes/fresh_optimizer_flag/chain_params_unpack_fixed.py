# expect: clean
# source: https://github.com/pytorch/pytorch/issues/4957
import itertools
import torch
from torch.autograd import Variable

torch.manual_seed(0)

# toy regression: y = 3x + 1 plus a learned residual scale W applied to x**2
N = 64
x = torch.linspace(-1, 1, N).unsqueeze(1)
y = 3 * x + 1 + 0.5 * x ** 2 + 0.05 * torch.randn(N, 1)

net = torch.nn.Linear(1, 1)
W = Variable(torch.zeros(1, 1), requires_grad=True)


def predict(x):
    return net(x) + (x ** 2) @ W


optimizer = torch.optim.Adam(itertools.chain(net.parameters(), [W]), lr=0.05)

for step in range(50):
    optimizer.zero_grad()
    loss = ((predict(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(step, loss.item())

print('weight', net.weight.item(), 'bias', net.bias.item(), 'W', W.item())
