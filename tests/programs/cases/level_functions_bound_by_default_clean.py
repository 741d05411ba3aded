# expect: clean
# shape: the twin of level_functions_bound_by_default_crash.py whose sampler detaches the features it is given: the proposal loss frees only the proposal networks' graphs
import torch
from torch import nn


class Sampler:
    def __init__(self, nets):
        self.level_fns = [lambda x, p=p: torch.sigmoid(p(x)) for p in nets]
        self.cache = []

    def sample(self, feats):
        feats = feats.detach()
        for fn in self.level_fns:
            self.cache.append(fn(feats))
        return self.cache[-1]

    def proposal_loss(self):
        loss = 0.0
        while self.cache:
            loss = loss + self.cache.pop().mean()
        return loss


torch.manual_seed(0)
encoder = nn.Linear(4, 4)
nets = [nn.Linear(4, 1), nn.Linear(4, 1)]
head = nn.Linear(4, 1)
sampler = Sampler(nets)
feats = encoder(torch.randn(8, 4))
sampler.sample(feats)
sampler.proposal_loss().backward()
loss = head(feats).pow(2).mean()
loss.backward()
