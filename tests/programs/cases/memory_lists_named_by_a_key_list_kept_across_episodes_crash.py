# expect: freed_graph
# shape: a rollout memory whose lists are made and filled by `setattr`/`getattr` over a class list of names, from `**items`: never cleared, the next episode's loss stacks the previous one's log-probs
import torch
import torch.nn as nn


class Memory:
    KEYS = ["log_probs", "values"]

    def __init__(self):
        self.clear()

    def clear(self):
        for key in self.KEYS:
            setattr(self, key, [])

    def add(self, **items):
        for key in self.KEYS:
            getattr(self, key).append(items[key])


policy = nn.Linear(4, 2)
critic = nn.Linear(4, 1)
opt = torch.optim.Adam(list(policy.parameters()) + list(critic.parameters()), lr=1e-3)
memory = Memory()
for episode in range(3):
    x = torch.randn(1, 4)
    memory.add(log_probs=policy(x).log_softmax(-1)[0, 0], values=critic(x)[0, 0])
    loss = -torch.stack(getattr(memory, "log_probs")).sum() + torch.stack(memory.values).pow(2).sum()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
