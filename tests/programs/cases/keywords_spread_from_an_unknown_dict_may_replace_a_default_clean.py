# expect: clean
# shape: `ThresholdedLoss(**params)` with `params` read at run time: it may set the parameter whose default would cut the graph (here it sets None), so the default is not assumed
import json

import torch
import torch.nn as nn


class ThresholdedLoss(nn.Module):
    def __init__(self, threshold=0.5):
        super().__init__()
        self.threshold = threshold

    def forward(self, pred):
        if self.threshold is not None:
            pred = (pred > self.threshold).float()
        return pred.mean()


params = json.loads('{"threshold": null}')
loss_fn = ThresholdedLoss(**params)
net = nn.Linear(4, 1)
loss = loss_fn(torch.sigmoid(net(torch.randn(3, 4))))
loss.backward()
