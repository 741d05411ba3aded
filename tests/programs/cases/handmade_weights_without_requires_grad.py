# expect: no_grad_fn
# shape: weights made by hand and given to an optimizer, none of them requiring grad
import torch

w1 = torch.randn(4, 8) * 0.5
b1 = torch.zeros(8)
w2 = torch.randn(8, 1) * 0.5
opt = torch.optim.SGD([w1, b1, w2], lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(2):
    pred = torch.tanh(x @ w1 + b1) @ w2
    loss = ((pred - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
