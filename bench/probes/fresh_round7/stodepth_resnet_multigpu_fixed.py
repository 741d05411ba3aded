# expect: clean
# source: https://github.com/shamangary/Pytorch-Stochastic-Depth-Resnet/issues/2
"""Stochastic-depth ResNet-18 (linear decay of survival probability) trained
data-parallel over several replicas.

Model code follows TYY_stodepth_lineardecay.py; the data-parallel wrapper is a
small CPU re-implementation of nn.DataParallel (replicate / scatter /
parallel_apply / gather) so the script runs on machines without GPUs.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class StoDepth_BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, prob, multFlag, inplanes, planes, stride=1, downsample=None):
        super(StoDepth_BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride
        self.prob = prob
        self.m = torch.distributions.bernoulli.Bernoulli(torch.Tensor([self.prob]))
        self.multFlag = multFlag

    def forward(self, x):

        identity = x.clone()

        if self.training:
            if torch.equal(self.m.sample(), torch.ones(1)):

                out = self.conv1(x)
                out = self.bn1(out)
                out = self.relu(out)
                out = self.conv2(out)
                out = self.bn2(out)

                if self.downsample is not None:
                    identity = self.downsample(x)

                out += identity
            else:
                if self.downsample is not None:
                    identity = self.downsample(x)

                out = identity
        else:
            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)
            out = self.conv2(out)
            out = self.bn2(out)

            if self.downsample is not None:
                identity = self.downsample(x)

            if self.multFlag:
                out = self.prob * out + identity
            else:
                out = out + identity

        out = self.relu(out)

        return out


class ResNet_StoDepth_lineardecay(nn.Module):

    def __init__(self, block, prob_0_L, multFlag, layers, num_classes=10, width=16):
        super(ResNet_StoDepth_lineardecay, self).__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)

        self.multFlag = multFlag
        self.prob_now = prob_0_L[0]
        self.prob_delta = prob_0_L[0] - prob_0_L[1]
        self.prob_step = self.prob_delta / (sum(layers) - 1)

        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.prob_now, self.multFlag, self.inplanes, planes, stride, downsample))
        self.prob_now = self.prob_now - self.prob_step
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.prob_now, self.multFlag, self.inplanes, planes))
            self.prob_now = self.prob_now - self.prob_step

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        return self.fc(x)


def resnet18_StoDepth_lineardecay(prob_0_L=[1, 0.5], multFlag=True, **kwargs):
    return ResNet_StoDepth_lineardecay(StoDepth_BasicBlock, prob_0_L, multFlag, [2, 2, 2, 2], **kwargs)


# ---------------------------------------------------------------------------
# data parallel (CPU port of torch.nn.parallel.replicate / DataParallel)
# ---------------------------------------------------------------------------
class Broadcast(torch.autograd.Function):
    """Copies every input once per replica; gradients are summed back."""

    @staticmethod
    def forward(ctx, num_replicas, *inputs):
        ctx.num_inputs = len(inputs)
        return tuple(t.clone() for _ in range(num_replicas) for t in inputs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        n = ctx.num_inputs
        grads = list(grad_outputs[:n])
        for r in range(1, len(grad_outputs) // n):
            for i in range(n):
                grads[i] = grads[i] + grad_outputs[r * n + i]
        return (None, *grads)


def replicate(network, num_replicas):
    params = list(network.parameters())
    param_indices = {param: idx for idx, param in enumerate(params)}
    flat = Broadcast.apply(num_replicas, *params)
    param_copies = [flat[j * len(params):(j + 1) * len(params)] for j in range(num_replicas)]

    modules = list(network.modules())
    module_indices = {module: i for i, module in enumerate(modules)}
    module_copies = [[m._replicate_for_data_parallel() for m in modules] for _ in range(num_replicas)]

    for i, module in enumerate(modules):
        for key, child in module._modules.items():
            for j in range(num_replicas):
                setattr(module_copies[j][i], key, module_copies[j][module_indices[child]])
        for key, param in module._parameters.items():
            for j in range(num_replicas):
                if param is None:
                    setattr(module_copies[j][i], key, None)
                else:
                    setattr(module_copies[j][i], key, param_copies[j][param_indices[param]])
        for key, buf in module._buffers.items():
            for j in range(num_replicas):
                module_copies[j][i]._buffers[key] = buf
    return [module_copies[j][0] for j in range(num_replicas)]


class DataParallel(nn.Module):
    def __init__(self, module, num_replicas=2):
        super(DataParallel, self).__init__()
        self.module = module
        self.num_replicas = num_replicas

    def forward(self, inputs):
        chunks = inputs.chunk(self.num_replicas, dim=0)
        replicas = replicate(self.module, len(chunks))
        outputs = [replica(chunk) for replica, chunk in zip(replicas, chunks)]
        return torch.cat(outputs, dim=0)


def train(model, optimizer, images, labels, epochs=2, batch_size=8):
    model.train()
    for epoch in range(epochs):
        total = 0.0
        for start in range(0, images.size(0), batch_size):
            x = images[start:start + batch_size]
            y = labels[start:start + batch_size]
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print("epoch %d  loss %.4f" % (epoch, total))


net = resnet18_StoDepth_lineardecay(prob_0_L=[1, 0.5], multFlag=True)
model = DataParallel(net, num_replicas=2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)

images = torch.randn(32, 3, 16, 16)
labels = torch.randint(0, 10, (32,))
train(model, optimizer, images, labels)

model.eval()
with torch.no_grad():
    acc = (model(images).argmax(1) == labels).float().mean().item()
print("train acc %.3f" % acc)
