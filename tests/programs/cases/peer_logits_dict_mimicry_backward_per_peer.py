# expect: freed_graph
# shape: deep mutual learning: peers' logits kept in a dict built by a comprehension over enumerate(self.peers); each peer's loss mimics the others' live distributions, so the first backward frees the graphs the second needs
import torch
import torch.nn as nn
import torch.nn.functional as F


class MutualLearner:
    def __init__(self, num_peers, temperature=2.0):
        self.peers = [nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)) for _ in range(num_peers)]
        self.optimizers = [torch.optim.SGD(p.parameters(), lr=0.05) for p in self.peers]
        self.temperature = temperature
        self._logits = {}

    def _forward_all(self, x):
        self._logits = {i: peer(x) for i, peer in enumerate(self.peers)}

    def _peer_distribution(self, j):
        return F.softmax(self._logits[j] / self.temperature, dim=1)

    def _mimicry_loss(self, i):
        log_p = F.log_softmax(self._logits[i] / self.temperature, dim=1)
        kl = 0.0
        for j in range(len(self.peers)):
            if j == i:
                continue
            kl = kl + F.kl_div(log_p, self._peer_distribution(j), reduction="batchmean")
        return kl / (len(self.peers) - 1)

    def step(self, x, y):
        self._forward_all(x)
        for i, (peer, opt) in enumerate(zip(self.peers, self.optimizers)):
            loss = F.cross_entropy(self._logits[i], y) + self._mimicry_loss(i)
            opt.zero_grad()
            loss.backward()  # raises
            opt.step()


learner = MutualLearner(num_peers=2)
for _ in range(2):
    learner.step(torch.randn(8, 6), torch.randint(0, 3, (8,)))
