# expect: clean
# source: https://github.com/fangwei123456/Spike-Element-Wise-ResNet/issues/19
"""SEW-ResNet spiking network (IF neurons from the installed `spikingjelly`
library) trained with the fit_one_epoch loop from utils_fit.py to classify
synthetic DVS-gesture-like event-frame sequences (T=4 time steps)."""
import torch
import torch.nn as nn


class sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        if x.requires_grad:
            ctx.save_for_backward(x)
            ctx.alpha = alpha
        return (x >= 0).to(x)

    @staticmethod
    def backward(ctx, grad_output):
        sgax = (ctx.saved_tensors[0] * ctx.alpha).sigmoid_()
        return grad_output * (1. - sgax) * sgax * ctx.alpha, None


class Sigmoid(nn.Module):
    def __init__(self, alpha=4.0, spiking=True):
        super().__init__()
        self.alpha = alpha
        self.spiking = spiking

    def forward(self, x):
        return sigmoid.apply(x, self.alpha)


import torch.nn as nn



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


def reset_net(net):
    """Reset the hidden states of all stateful modules in ``net``."""
    for m in net.modules():
        if hasattr(m, 'reset'):
            m.reset()


import torch
import torch.nn as nn


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


import torch.nn.functional as F


def fit_one_epoch(model, optimizer, gen, epoch, epoch_step):
    loss_sum, correct, seen = 0, 0, 0
    model.train()
    for iteration, (frames, labels) in enumerate(gen):
        if iteration >= epoch_step:
            break
        # frames: [N, T, C, H, W] -> [T, N, C, H, W]
        frames = frames.transpose(0, 1)
        outputs = model(frames)
        loss = F.cross_entropy(outputs, labels)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        reset_net(model)

        loss_sum += loss.item() * labels.numel()
        correct += (outputs.argmax(1) == labels).sum().item()
        seen += labels.numel()
    print('Epoch %d: loss %.4f acc %.3f' % (epoch + 1, loss_sum / seen, correct / seen))


import torch



def make_event_batches(n_batches, batch_size, T=4, num_classes=11, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        labels = torch.randint(0, num_classes, (batch_size,), generator=g)
        rate = 0.05 + 0.4 * (labels.float() / num_classes).view(-1, 1, 1, 1, 1)
        frames = (torch.rand(batch_size, T, 2, size, size, generator=g) < rate).float()
        batches.append((frames, labels))
    return batches


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SEWResNet(in_channels=2, num_classes=11, width=16, connect_f='ADD')
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = make_event_batches(n_batches=4, batch_size=8)
    for epoch in range(2):
        fit_one_epoch(model, optimizer, gen, epoch, epoch_step=len(gen))
