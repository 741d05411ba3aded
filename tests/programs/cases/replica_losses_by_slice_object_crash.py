# expect: nonscalar_backward
# shape: a data-parallel style criterion splits the batch taken with a slice object into one chunk per device and stacks the per-replica losses; the result has one loss per replica
import torch
import torch.nn as nn


class ReplicatedCriterion(nn.Module):
    def __init__(self, device_ids):
        super().__init__()
        self.device_ids = device_ids
        self.crit = nn.MSELoss()

    def forward(self, preds, targets):
        n = len(self.device_ids)
        return torch.stack([self.crit(p, t) for p, t in zip(preds.chunk(n), targets.chunk(n))])


torch.manual_seed(0)
model = nn.Linear(6, 1)
criterion = ReplicatedCriterion([0, 1])
data, labels = torch.randn(32, 6), torch.randn(32, 1)
bs = 8
for it in range(2):
    sl = slice(it * bs, (it + 1) * bs)
    loss = criterion(model(data[sl]), labels[sl])
    loss.backward()  # raises
