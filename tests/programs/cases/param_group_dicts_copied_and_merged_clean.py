# expect: clean
# shape: the twin of param_group_dicts_copied_and_merged_crash.py whose prompt is a leaf of its own (`prompt_table[:4].detach().clone().requires_grad_()`): every copied group holds a leaf
import torch
import torch.nn as nn

encoder = nn.Linear(8, 8)
prompt_table = torch.randn(16, 8, requires_grad=True)
prompt = prompt_table[:4].detach().clone().requires_grad_()

base = {"params": [prompt], "weight_decay": 0.0}
head_group = dict(base, lr=1e-3)
tail_group = {**base, "lr": 1e-4}
spare = base.copy()
spare.setdefault("lr", 1e-2)
groups = [{"params": list(encoder.parameters()), "lr": 1e-3}, head_group]
optimizer = torch.optim.AdamW(groups)
print(tail_group["lr"], spare["lr"])
