# expect: clean
# shape: the twin of schedule_closure_counts_steps_crash.py whose proposal loss reads the ray directions detached: its backward frees only the proposal's graph
import torch
from torch import nn


def make_update_fn(every=4.0, warmup=1000):
    steps_since = 0

    def should_update(step):
        nonlocal steps_since
        target = min(step / warmup, 1.0) * every
        if steps_since > target:
            steps_since = 0
            return True
        steps_since += 1
        return False

    return should_update


torch.manual_seed(0)
rays = nn.Linear(3, 3)
field, proposal = nn.Linear(3, 1), nn.Linear(3, 1)
opt = torch.optim.Adam([*field.parameters(), *proposal.parameters()], lr=1e-3)
update_proposal = make_update_fn()
for step in range(3):
    dirs = rays(torch.randn(16, 3))
    if update_proposal(step):
        (proposal(dirs.detach()) ** 2).mean().backward()
    loss = (field(dirs) - 1.0).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
