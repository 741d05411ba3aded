import torch.nn as nn

from spikingjelly.clock_driven.surrogate import Sigmoid


class BaseNode(nn.Module):
    def __init__(self, v_threshold=1., v_reset=0., surrogate_function=Sigmoid(),
                 detach_reset=False):
        super().__init__()
        self.v_threshold = v_threshold
        self.v_reset = v_reset
        self.v = v_reset
        self.surrogate_function = surrogate_function
        self.detach_reset = detach_reset

    def neuronal_fire(self):
        return self.surrogate_function(self.v - self.v_threshold)

    def neuronal_reset(self, spike):
        spike_d = spike.detach() if self.detach_reset else spike
        self.v = (1. - spike_d) * self.v + spike_d * self.v_reset

    def forward(self, x):
        self.neuronal_charge(x)
        spike = self.neuronal_fire()
        self.neuronal_reset(spike)
        return spike

    def reset(self):
        self.v = self.v_reset


class IFNode(BaseNode):
    def neuronal_charge(self, x):
        self.v = self.v + x


class LIFNode(BaseNode):
    def __init__(self, tau=2., **kwargs):
        super().__init__(**kwargs)
        self.tau = tau

    def neuronal_charge(self, x):
        self.v = self.v + (x - (self.v - self.v_reset)) / self.tau
