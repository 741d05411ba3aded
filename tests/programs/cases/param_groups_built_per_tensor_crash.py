# expect: nonleaf_optimizer
# shape: param groups built one per tensor, in a loop over a short list and in a comprehension over zip(...): each dict is its own object, and the group holding the scaled embedding (a product, not a leaf) makes the optimizer raise
import torch

emb = torch.randn(10, 4, requires_grad=True) * 0.02
bias = torch.zeros(4, requires_grad=True)
gain = torch.ones(4, requires_grad=True)

groups = []
for p in [bias, gain]:
    groups.append({"params": [p], "lr": 1e-2})
groups += [{"params": [p], "lr": lr} for p, lr in zip([emb, bias], [1e-3, 1e-2])][:1]
opt = torch.optim.Adam(groups)  # raises
for _ in range(2):
    opt.zero_grad()
    (emb.sum() + bias.sum() * gain.sum()).backward()
    opt.step()
