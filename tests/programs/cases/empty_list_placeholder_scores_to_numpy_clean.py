# expect: clean
# shape: a scoring helper returns one score tensor per kept proposal, or an empty list when none is kept; the first score is logged through numpy, detached: an empty list indexed would raise first, so the score indexed is the tensor
import torch
import torch.nn as nn

scorer = nn.Linear(5, 1)


def scores_for(proposals):
    kept = [p for p in proposals if p.abs().sum() > 0]
    if not kept:
        return []
    return list(scorer(torch.stack(kept)).unbind(0))


scores = scores_for(torch.randn(4, 5))
best = scores[0]
print(best.detach().numpy())
