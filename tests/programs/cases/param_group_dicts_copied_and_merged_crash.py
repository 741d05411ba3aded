# expect: nonleaf_optimizer
# shape: param-group dicts derived from a base group by `dict(base, lr=...)`, `{**base, ...}`, `base.copy()` and `setdefault`: each keeps the base's `params`, whose prompt embedding is a slice (not a leaf), so the optimizer raises
import torch
import torch.nn as nn

encoder = nn.Linear(8, 8)
prompt_table = torch.randn(16, 8, requires_grad=True)
prompt = prompt_table[:4]

base = {"params": [prompt], "weight_decay": 0.0}
head_group = dict(base, lr=1e-3)
tail_group = {**base, "lr": 1e-4}
spare = base.copy()
spare.setdefault("lr", 1e-2)
groups = [{"params": list(encoder.parameters()), "lr": 1e-3}, head_group]
optimizer = torch.optim.AdamW(groups)  # raises
print(tail_group["lr"], spare["lr"])
