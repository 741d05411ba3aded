# expect: grad_unused
# source: https://github.com/pytorch/pytorch/issues/20663
import torch
from torch.autograd import Variable

torch.manual_seed(0)


def bilinear_score(a, b, W=None):
    if W is None:
        return torch.matmul(a.t(), b)
    return torch.matmul(torch.matmul(a.t(), W), b)


a = Variable(torch.Tensor([1., 3., 5.]), requires_grad=True)
b = Variable(torch.Tensor([2., 4., 6.]), requires_grad=True)
a = a.unsqueeze(1)
b = b.unsqueeze(1)
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
z = torch.cat((a, b), dim=1)
print(z.shape)
gz = torch.autograd.grad(c, z)[0]  # raises
print(gz)

gs = torch.autograd.grad(s, z)[0]
print(gs)
print(torch.allclose(gs[:, 0:1], ga), torch.allclose(gs[:, 1:2], gb))
