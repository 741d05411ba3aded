# expect: clean
# shape: the twin of param_groups_built_per_tensor_crash.py whose embedding is made a leaf at the end of the chain: every group holds a leaf
import torch

emb = (torch.randn(10, 4) * 0.02).requires_grad_()
bias = torch.zeros(4, requires_grad=True)
gain = torch.ones(4, requires_grad=True)

groups = []
for p in [bias, gain]:
    groups.append({"params": [p], "lr": 1e-2})
groups += [{"params": [p], "lr": lr} for p, lr in zip([emb, bias], [1e-3, 1e-2])][:1]
opt = torch.optim.Adam(groups)
for _ in range(2):
    opt.zero_grad()
    (emb.sum() + bias.sum() * gain.sum()).backward()
    opt.step()
