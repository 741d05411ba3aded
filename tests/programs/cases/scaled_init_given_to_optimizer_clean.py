# expect: clean
# shape: the same trainer makes the scaled weights a leaf before asking for grad
import torch
import torch.nn.functional as F


class SoftmaxRegression:
    def __init__(self, n_in, n_out, lr):
        self.w = (torch.randn(n_in, n_out) * 0.01).requires_grad_()
        self.b = torch.zeros(n_out, requires_grad=True)
        self.optimizer = torch.optim.SGD([{"params": [self.w, self.b], "lr": lr}])

    def step(self, x, y):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(x @ self.w + self.b, y)
        loss.backward()
        self.optimizer.step()
        return loss.item()


model = SoftmaxRegression(4, 3, lr=0.5)
x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
for _ in range(3):
    print(model.step(x, y))
