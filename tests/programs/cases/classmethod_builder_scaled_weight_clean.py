# expect: clean
# shape: the twin of classmethod_builder_scaled_weight_crash.py whose classmethod makes the leaf at the end of the chain (`(torch.randn(n) * scale).requires_grad_()`)
import torch


class LearnedScale:
    def __init__(self, value):
        self.value = value

    @classmethod
    def build(cls, n, scale):
        return cls((torch.randn(n) * scale).requires_grad_())

    def twin(self, n):
        return self.build(n, 2.0)


base = LearnedScale.build(3, 0.5)
other = base.twin(3)
opt = torch.optim.SGD([other.value], lr=0.1)
for _ in range(2):
    opt.zero_grad()
    other.value.pow(2).sum().backward()
    opt.step()
