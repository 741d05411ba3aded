# expect: nonleaf_optimizer
# shape: a config class builds its learnable scale in a classmethod (`cls(torch.randn(n, requires_grad=True) * scale)`), called on the class and through an instance method; the optimizer is given the scale, a product and so not a leaf
import torch


class LearnedScale:
    def __init__(self, value):
        self.value = value

    @classmethod
    def build(cls, n, scale):
        return cls(torch.randn(n, requires_grad=True) * scale)

    def twin(self, n):
        return self.build(n, 2.0)


base = LearnedScale.build(3, 0.5)
other = base.twin(3)
opt = torch.optim.SGD([other.value], lr=0.1)  # raises
for _ in range(2):
    opt.zero_grad()
    other.value.pow(2).sum().backward()
    opt.step()
