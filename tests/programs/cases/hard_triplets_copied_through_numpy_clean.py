# expect: clean
# shape: the twin of hard_triplets_copied_through_numpy_crash.py that indexes the embeddings themselves (`a[hard]`), keeping their graph
import numpy as np
import torch
import torch.nn as nn

model = nn.Linear(4, 4)
crit = nn.TripletMarginLoss(0.5)

def select(a, p, n):
    mask = ((a - p).norm(dim=1) < 10).cpu().data.numpy().flatten()
    hard = np.where(mask == 1)
    if len(hard[0]) == 0:
        return None, hard
    sa = a[torch.from_numpy(hard[0])]
    sp = p[torch.from_numpy(hard[0])]
    sn = n[torch.from_numpy(hard[0])]
    return (sa, sp, sn), hard

for i in range(2):
    a, p, n = model(torch.randn(3, 4)), model(torch.randn(3, 4)), model(torch.randn(3, 4))
    selected, hard = select(a, p, n)
    if selected is None:
        continue
    sa, sp, sn = selected
    loss = crit(sa, sp, sn)
    loss.backward()
