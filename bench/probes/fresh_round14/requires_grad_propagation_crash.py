# expect: nonleaf_optimizer
# source: https://discuss.pytorch.org/t/requires-grad-propagation/93792
"""Forum question: a small module holds two constant matrices and one tensor
that should be learned; the learned tensor is fitted with plain SGD so that
cte1 @ tensor + cte2 sums to a target value."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Affine(nn.Module):
    def __init__(self, init_scale=0.5):
        super().__init__()
        # constants, should not be trained
        self.register_buffer("cte1", torch.rand(5, 3))
        self.register_buffer("cte2", torch.rand(5, 5))
        # the only thing we want to learn
        self.tensor = torch.ones(3, 5, requires_grad=True) * init_scale

    def forward(self):
        return self.cte1 @ self.tensor + self.cte2


model = Affine()
print("Requires grad?", model.tensor.requires_grad)
optim = torch.optim.SGD([model.tensor], lr=0.01)  # raises
target = torch.tensor(10.0)

print(f"Initial tensor\n{model.tensor}")
for i in range(5):
    optim.zero_grad()
    output = model()
    loss = (output.sum() - target) ** 2
    loss.backward()
    print(f"Iteration {i} loss {loss.item():.4f}")
    print(f"Tensor gradients\n {model.tensor.grad}")
    optim.step()
print(f"Tensors\n {model.tensor}")
