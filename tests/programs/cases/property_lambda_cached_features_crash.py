# expect: freed_graph
# shape: a property made with property(lambda) returns features computed once in __init__; a class-body lambda builds each step's loss from them, so the second backward reaches the freed graph
import torch
import torch.nn as nn


class FrozenInputProbe:
    def __init__(self, encoder, inputs):
        self.encoder, self.inputs = encoder, inputs
        self._features = encoder(inputs)

    features = property(lambda self: self._features)
    probe_loss = lambda self, head: head(self.features).pow(2).mean()


torch.manual_seed(0)
probe = FrozenInputProbe(nn.Linear(6, 4), torch.randn(8, 6))
head = nn.Linear(4, 1)
optimizer = torch.optim.SGD(list(head.parameters()) + list(probe.encoder.parameters()), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    loss = probe.probe_loss(head)
    loss.backward()  # raises
    optimizer.step()
