# expect: freed_graph
# shape: a proposal network is updated only when a schedule closure says so: it counts the steps since its last update in a `nonlocal` variable and compares them with a warm-up ratio `min(step / warmup, 1.0) * every`; on the second step it updates, and the proposal loss frees the ray graph the main loss needs
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
        (proposal(dirs) ** 2).mean().backward()
    loss = (field(dirs) - 1.0).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
