# expect: clean
# shape: Variable(t, requires_grad=True) is a new tensor object: t itself still does not require grad
import torch
from torch.autograd import Variable

t = torch.zeros(3)
v = Variable(t, requires_grad=True)   # a new tensor object; t does not require grad
v.requires_grad_()
t.add_(1)                             # fine
print(t.requires_grad)
