# expect: no_grad_fn
# shape: the twin of adapters_injected_by_name_after_freezing_clean.py that freezes after injecting the adapters: every parameter, the adapters' too, is frozen, and the loss has no graph
import torch
import torch.nn as nn


class Adapter(nn.Module):
    def __init__(self, base):
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.in_features, 2, bias=False)
        self.up = nn.Linear(2, base.out_features, bias=False)

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(8, 8)
        self.mlp = nn.Linear(8, 8)

    def forward(self, x):
        return self.mlp(torch.relu(self.q_proj(x)))


def inject(model, targets):
    names = [name for name, _ in model.named_modules() if name.split(".")[-1] in targets]
    for name in names:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, Adapter(getattr(parent, attr)))


model = nn.Sequential(Block(), Block())
inject(model, ["q_proj"])
for p in model.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss = model(torch.randn(4, 8)).pow(2).mean()
loss.backward()  # raises
opt.step()
