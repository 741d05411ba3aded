# expect: clean
# shape: the property runs the encoder on each read, so every step has a graph of its own
import torch
import torch.nn as nn


class FrozenInputProbe:
    def __init__(self, encoder, inputs):
        self.encoder, self.inputs = encoder, inputs
        self._features = encoder(inputs)

    features = property(lambda self: self.encoder(self.inputs))
    probe_loss = lambda self, head: head(self.features).pow(2).mean()


torch.manual_seed(0)
probe = FrozenInputProbe(nn.Linear(6, 4), torch.randn(8, 6))
head = nn.Linear(4, 1)
optimizer = torch.optim.SGD(list(head.parameters()) + list(probe.encoder.parameters()), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    loss = probe.probe_loss(head)
    loss.backward()
    optimizer.step()
