import torch
import torch.nn as nn
from spikingjelly.clock_driven.neuron import IFNode
from spikingjelly.clock_driven.surrogate import Sigmoid


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1, connect_f='ADD'):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(inplanes, planes, stride), nn.BatchNorm2d(planes)
        self.sn1 = IFNode(detach_reset=True, surrogate_function=Sigmoid())
        self.conv2, self.bn2 = conv3x3(planes, planes), nn.BatchNorm2d(planes)
        self.sn2 = IFNode(detach_reset=True, surrogate_function=Sigmoid())
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
                IFNode(detach_reset=True, surrogate_function=Sigmoid()))
        self.connect_f = connect_f

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.sn1(self.bn1(self.conv1(x)))
        out = self.sn2(self.bn2(self.conv2(out)))
        if self.connect_f == 'ADD':
            out = out + identity
        elif self.connect_f == 'AND':
            out = out * identity
        return out


class SEWResNet(nn.Module):
    """Spike-element-wise ResNet; the input is a [T, N, C, H, W] event-frame sequence."""

    def __init__(self, in_channels=2, num_classes=11, width=16, connect_f='ADD'):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.sn1 = IFNode(detach_reset=True, surrogate_function=Sigmoid())
        self.layer1 = BasicBlock(width, width, connect_f=connect_f)
        self.layer2 = BasicBlock(width, 2 * width, stride=2, connect_f=connect_f)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        out_spikes = 0.
        for t in range(x.shape[0]):
            y = self.sn1(self.bn1(self.conv1(x[t])))
            y = self.layer2(self.layer1(y))
            out_spikes = out_spikes + self.fc(torch.flatten(self.avgpool(y), 1))
        return out_spikes / x.shape[0]
