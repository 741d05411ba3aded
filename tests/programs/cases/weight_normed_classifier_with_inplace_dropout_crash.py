# expect: inplace_version
# shape: a classifier of weight-normalised linear layers (`weight_norm(nn.Linear(...))` returns the layer it is given) with `nn.Dropout(inplace=True)` after a ReLU: dropout overwrites the ReLU's output, which ReLU saved for backward
import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm


class Classifier(nn.Module):
    def __init__(self, in_dim, hid, out_dim, dropout):
        super().__init__()
        self.main = nn.Sequential(
            weight_norm(nn.Linear(in_dim, hid), dim=None),
            nn.ReLU(),
            nn.Dropout(dropout, inplace=True),
            weight_norm(nn.Linear(hid, out_dim), dim=None),
        )

    def forward(self, x):
        return self.main(x)


clf = Classifier(8, 16, 3, 0.5)
opt = torch.optim.Adamax(clf.parameters())
logits = clf(torch.randn(4, 8))
loss = nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0]))
loss.backward()  # raises
opt.step()
