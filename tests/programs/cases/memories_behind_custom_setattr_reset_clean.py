# expect: clean
# shape: a spiking neuron keeps its membrane potential in a dict of memories through its own `__setattr__`/`__getattr__`, and the training step calls `reset()` after each backward, which puts the initial value back: the next batch does not reach the freed graph (the attribute written is not where the value goes)
import torch
import torch.nn as nn


class MemoryModule(nn.Module):
    def __init__(self):
        super().__init__()
        self._memories = {}
        self._defaults = {}

    def register_memory(self, name, value):
        self._memories[name] = value
        self._defaults[name] = value

    def __getattr__(self, name):
        if "_memories" in self.__dict__ and name in self.__dict__["_memories"]:
            return self.__dict__["_memories"][name]
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        if "_memories" in self.__dict__ and name in self.__dict__["_memories"]:
            self.__dict__["_memories"][name] = value
        else:
            super().__setattr__(name, value)

    def reset(self):
        for name, value in self._defaults.items():
            self._memories[name] = value


class LIF(MemoryModule):
    def __init__(self):
        super().__init__()
        self.register_memory("v", 0.0)

    def forward(self, x):
        self.v = self.v * 0.5 + x
        return torch.sigmoid(self.v - 1.0)


layer, neuron = nn.Linear(4, 4), LIF()
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
for step in range(3):
    out = neuron(layer(torch.randn(2, 4)))
    loss = out.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    neuron.reset()
