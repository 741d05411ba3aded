# expect: nonleaf_optimizer
# source: https://github.com/pytorch/pytorch/issues/4957
import itertools

import torch

torch.manual_seed(0)

# linear regression with a learned (log) noise scale
n, d = 256, 3
X = torch.randn(n, d)
true_w = torch.tensor([[1.5], [-2.0], [0.7]])
y = X @ true_w + 0.3 + 0.25 * torch.randn(n, 1)

net = torch.nn.Linear(d, 1)
log_sigma = torch.zeros(1, 1, requires_grad=True)


def gaussian_nll(pred, target, log_sigma):
    return (0.5 * ((target - pred) / log_sigma.exp()) ** 2 + log_sigma).mean()


optimizer = torch.optim.Adam(itertools.chain(*net.parameters(), log_sigma), lr=0.05)  # raises

for epoch in range(200):
    optimizer.zero_grad()
    loss = gaussian_nll(net(X), y, log_sigma)
    loss.backward()
    optimizer.step()
    if epoch % 50 == 0:
        print(f"epoch {epoch:3d}  nll {loss.item():.4f}  sigma {log_sigma.exp().item():.3f}")

print("weights:", net.weight.data.view(-1).tolist(), "bias:", net.bias.item())
print("sigma:", log_sigma.exp().item())
