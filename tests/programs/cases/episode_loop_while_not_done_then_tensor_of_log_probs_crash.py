# expect: no_grad_fn
# shape: an episode run by `while not done:` (done is False on entry, decided by data later), then a loss built with `torch.tensor(log_probs)`, which copies the values without their graph
import torch
import torch.nn as nn

policy = nn.Linear(4, 2)
opt = torch.optim.SGD(policy.parameters(), lr=0.01)
for episode in range(2):
    done, steps, log_probs = False, 0, []
    while not done:
        logits = policy(torch.randn(1, 4))
        log_probs.append(logits.log_softmax(-1)[0, 0])
        steps += 1
        done = steps >= 5 or torch.rand(()).item() < 0.2
    loss = -torch.tensor(log_probs).sum()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
