# expect: clean
# shape: requires_grad decided by the batch shape (x.size(0) > 1), which holds for an 8-row batch
import torch

torch.manual_seed(0)
x = torch.randn(8, 4)
w = torch.zeros(x.shape[1], 1, requires_grad=x.size(0) > 1)
loss = (x @ w - 1).pow(2).mean()
loss.backward()
