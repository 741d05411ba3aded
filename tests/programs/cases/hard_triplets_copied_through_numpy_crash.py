# expect: no_grad_fn
# shape: hard triplets selected by a helper that returns `None` when there are none, else copies of the embeddings made through numpy (`torch.from_numpy(a.data.numpy()[hard])`); past `if selected is None: continue`, the loss is built from the copies alone and has no graph
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
    sa = torch.from_numpy(a.cpu().data.numpy()[hard])
    sp = torch.from_numpy(p.cpu().data.numpy()[hard])
    sn = torch.from_numpy(n.cpu().data.numpy()[hard])
    return (sa, sp, sn), hard

for i in range(2):
    a, p, n = model(torch.randn(3, 4)), model(torch.randn(3, 4)), model(torch.randn(3, 4))
    selected, hard = select(a, p, n)
    if selected is None:
        continue
    sa, sp, sn = selected
    loss = crit(sa, sp, sn)
    loss.backward()  # raises
