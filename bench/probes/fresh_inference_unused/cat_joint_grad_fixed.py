# expect: clean
# source: https://github.com/pytorch/pytorch/issues/20663
import torch
from torch.autograd import Variable

torch.manual_seed(0)


def bilinear_score(a, b, W=None):
    if W is None:
        return torch.matmul(a.t(), b)
    return torch.matmul(torch.matmul(a.t(), W), b)


z = Variable(torch.Tensor([[1., 2.], [3., 4.], [5., 6.]]), requires_grad=True)
a = z[:, 0:1]
b = z[:, 1:2]
c = torch.matmul(a.t(), b)

print(torch.autograd.grad(c, a, retain_graph=True)[0])  # returns b
print(torch.autograd.grad(c, b, retain_graph=True)[0])  # returns a

# same thing with a learned bilinear form
W = torch.randn(3, 3, requires_grad=True)
s = bilinear_score(a, b, W)
ga, gb = torch.autograd.grad(s, (a, b), retain_graph=True)
print("d s / d a:", ga.squeeze(1))
print("d s / d b:", gb.squeeze(1))

# now I want both gradients in one [3, 2] tensor, one column per vector
print(z.shape)
gz = torch.autograd.grad(c, z)[0]
print(gz)

gs = torch.autograd.grad(s, z)[0]
print(gs)
print(torch.allclose(gs[:, 0:1], ga), torch.allclose(gs[:, 1:2], gb))
