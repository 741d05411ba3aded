# expect: grad_unused
# source: https://github.com/dragen1860/DARTS-PyTorch/issues/2
"""DARTS search (second-order / unrolled architecture gradient) on a tiny CPU setup."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import autograd

torch.manual_seed(0)

# ----------------------------------------------------------------------------- genotypes.py / operations.py
PRIMITIVES = ['none', 'max_pool_3x3', 'skip_connect', 'sep_conv_3x3']


def ReLUConvBN(C_in, C_out, kernel_size, stride, padding, affine=True):
    return nn.Sequential(nn.ReLU(inplace=False), nn.Conv2d(C_in, C_out, kernel_size, stride, padding, bias=False),
                         nn.BatchNorm2d(C_out, affine=affine))


def SepConv(C_in, C_out, kernel_size, stride, padding, affine=True):
    return nn.Sequential(nn.ReLU(inplace=False),
                         nn.Conv2d(C_in, C_in, kernel_size, stride, padding, groups=C_in, bias=False),
                         nn.Conv2d(C_in, C_out, 1, bias=False), nn.BatchNorm2d(C_out, affine=affine))


class Zero(nn.Module):
    def __init__(self, stride):
        super().__init__()
        self.stride = stride

    def forward(self, x):
        return x[:, :, ::self.stride, ::self.stride].mul(0.)


class FactorizedReduce(nn.Module):
    def __init__(self, C_in, C_out, affine=True):
        super().__init__()
        self.relu = nn.ReLU(inplace=False)
        self.conv_1 = nn.Conv2d(C_in, C_out // 2, 1, stride=2, bias=False)
        self.conv_2 = nn.Conv2d(C_in, C_out // 2, 1, stride=2, bias=False)
        self.bn = nn.BatchNorm2d(C_out, affine=affine)

    def forward(self, x):
        x = self.relu(x)
        return self.bn(torch.cat([self.conv_1(x), self.conv_2(x[:, :, 1:, 1:])], dim=1))


OPS = {
    'none': lambda C, stride, affine: Zero(stride),
    'max_pool_3x3': lambda C, stride, affine: nn.MaxPool2d(3, stride=stride, padding=1),
    'skip_connect': lambda C, stride, affine: nn.Identity() if stride == 1 else FactorizedReduce(C, C, affine),
    'sep_conv_3x3': lambda C, stride, affine: SepConv(C, C, 3, stride, 1, affine),
}


# ----------------------------------------------------------------------------- model_search.py
class MixedLayer(nn.Module):
    def __init__(self, c, stride):
        super().__init__()
        self.layers = nn.ModuleList()
        for primitive in PRIMITIVES:
            layer = OPS[primitive](c, stride, False)
            if 'pool' in primitive:
                layer = nn.Sequential(layer, nn.BatchNorm2d(c, affine=False))
            self.layers.append(layer)

    def forward(self, x, weights):
        return sum(w * layer(x) for w, layer in zip(weights, self.layers))


class Cell(nn.Module):
    def __init__(self, steps, multiplier, cpp, cp, c, reduction, reduction_prev):
        super().__init__()
        self.reduction = reduction
        self.preprocess0 = FactorizedReduce(cpp, c, affine=False) if reduction_prev else ReLUConvBN(cpp, c, 1, 1, 0, False)
        self.preprocess1 = ReLUConvBN(cp, c, 1, 1, 0, affine=False)
        self.steps, self.multiplier = steps, multiplier
        self.layers = nn.ModuleList()
        for i in range(self.steps):
            for j in range(2 + i):
                stride = 2 if reduction and j < 2 else 1
                self.layers.append(MixedLayer(c, stride))

    def forward(self, s0, s1, weights):
        states = [self.preprocess0(s0), self.preprocess1(s1)]
        offset = 0
        for i in range(self.steps):
            s = sum(self.layers[offset + j](h, weights[offset + j]) for j, h in enumerate(states))
            offset += len(states)
            states.append(s)
        return torch.cat(states[-self.multiplier:], dim=1)


class Network(nn.Module):
    def __init__(self, c, num_classes, layers, criterion, steps=2, multiplier=2, stem_multiplier=3):
        super().__init__()
        self.c, self.num_classes, self.layers, self.criterion = c, num_classes, layers, criterion
        self.steps, self.multiplier = steps, multiplier
        c_curr = stem_multiplier * c
        self.stem = nn.Sequential(nn.Conv2d(3, c_curr, 3, padding=1, bias=False), nn.BatchNorm2d(c_curr))
        cpp, cp, c_curr = c_curr, c_curr, c
        self.cells = nn.ModuleList()
        reduction_prev = False
        for i in range(layers):
            if i in [layers // 3, 2 * layers // 3]:
                c_curr *= 2
                reduction = True
            else:
                reduction = False
            cell = Cell(steps, multiplier, cpp, cp, c_curr, reduction, reduction_prev)
            reduction_prev = reduction
            self.cells += [cell]
            cpp, cp = cp, multiplier * c_curr
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(cp, num_classes)
        k = sum(1 for i in range(self.steps) for j in range(2 + i))
        self.alpha_normal = nn.Parameter(1e-3 * torch.randn(k, len(PRIMITIVES)))
        self.alpha_reduce = nn.Parameter(1e-3 * torch.randn(k, len(PRIMITIVES)))
        self._arch_parameters = [self.alpha_normal, self.alpha_reduce]

    def new(self):
        model_new = Network(self.c, self.num_classes, self.layers, self.criterion, self.steps, self.multiplier)
        for x, y in zip(model_new.arch_parameters(), self.arch_parameters()):
            x.data.copy_(y.data)
        return model_new

    def forward(self, x):
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            weights = F.softmax(self.alpha_reduce if cell.reduction else self.alpha_normal, dim=-1)
            s0, s1 = s1, cell(s0, s1, weights)
        return self.classifier(self.global_pooling(s1).flatten(1))

    def loss(self, x, target):
        return self.criterion(self(x), target)

    def arch_parameters(self):
        return self._arch_parameters


# ----------------------------------------------------------------------------- arch.py
def concat(xs):
    return torch.cat([x.view(-1) for x in xs])


class Arch:
    def __init__(self, model, args):
        self.momentum, self.wd, self.model = args.momentum, args.wd, model
        self.optimizer = torch.optim.Adam(self.model.arch_parameters(), lr=args.arch_lr,
                                          betas=(0.5, 0.999), weight_decay=args.arch_wd)

    def comp_unrolled_model(self, x, target, eta, optimizer):
        """loss on train set and then update w_pi, not-in-place"""
        loss = self.model.loss(x, target)
        theta = concat(self.model.parameters()).detach()
        try:
            moment = concat(optimizer.state[v]['momentum_buffer'] for v in self.model.parameters())
            moment.mul_(self.momentum)
        except KeyError:
            moment = torch.zeros_like(theta)
        dtheta = concat(autograd.grad(loss, self.model.parameters())).data  # raises
        theta = theta - eta * (moment + dtheta + self.wd * theta)
        return self.construct_model_from_theta(theta)

    def step(self, x_train, target_train, x_valid, target_valid, eta, optimizer, unrolled):
        self.optimizer.zero_grad()
        if unrolled:
            self.backward_step_unrolled(x_train, target_train, x_valid, target_valid, eta, optimizer)
        else:  # directly optimize alpha on w, instead of w_pi
            self.model.loss(x_valid, target_valid).backward()
        self.optimizer.step()

    def backward_step_unrolled(self, x_train, target_train, x_valid, target_valid, eta, optimizer):
        unrolled_model = self.comp_unrolled_model(x_train, target_train, eta, optimizer)
        unrolled_loss = unrolled_model.loss(x_valid, target_valid)
        unrolled_loss.backward()
        dalpha = [v.grad for v in unrolled_model.arch_parameters()]
        vector = [v.grad.data for v in unrolled_model.parameters()]
        implicit_grads = self.hessian_vector_product(vector, x_train, target_train)
        for g, ig in zip(dalpha, implicit_grads):
            g.data.sub_(eta * ig.data)
        for v, g in zip(self.model.arch_parameters(), dalpha):
            v.grad = g.data.clone()

    def construct_model_from_theta(self, theta):
        model_new = self.model.new()
        model_dict = self.model.state_dict()
        params, offset = {}, 0
        for k, v in self.model.named_parameters():
            v_length = v.numel()
            params[k] = theta[offset: offset + v_length].view(v.size())
            offset += v_length
        model_dict.update(params)
        model_new.load_state_dict(model_dict)
        return model_new

    def hessian_vector_product(self, vector, x, target, r=1e-2):
        R = r / concat(vector).norm()
        for p, v in zip(self.model.parameters(), vector):
            p.data.add_(R * v)
        grads_p = autograd.grad(self.model.loss(x, target), self.model.arch_parameters())
        for p, v in zip(self.model.parameters(), vector):
            p.data.sub_(2 * R * v)
        grads_n = autograd.grad(self.model.loss(x, target), self.model.arch_parameters())
        for p, v in zip(self.model.parameters(), vector):
            p.data.add_(R * v)
        return [(x - y).div_(2 * R) for x, y in zip(grads_p, grads_n)]


# ----------------------------------------------------------------------------- train_search.py
def main(argv):
    parser = argparse.ArgumentParser("cifar")
    for name, typ, default in [('batchsz', int, 8), ('lr', float, 0.025), ('momentum', float, 0.9), ('wd', float, 3e-4),
                               ('init_ch', int, 4), ('layers', int, 8), ('arch_lr', float, 3e-4), ('arch_wd', float, 1e-3)]:
        parser.add_argument('--' + name, type=typ, default=default)
    parser.add_argument('--unrolled', action='store_true', default=False)
    args = parser.parse_args(argv)

    criterion = nn.CrossEntropyLoss()
    model = Network(args.init_ch, 10, args.layers, criterion)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.wd)
    arch = Arch(model, args)
    g = torch.Generator().manual_seed(1)
    for step in range(2):
        x = torch.randn(args.batchsz, 3, 16, 16, generator=g)
        target = torch.randint(0, 10, (args.batchsz,), generator=g)
        x_search = torch.randn(args.batchsz, 3, 16, 16, generator=g)
        target_search = torch.randint(0, 10, (args.batchsz,), generator=g)
        arch.step(x, target, x_search, target_search, args.lr, optimizer, unrolled=args.unrolled)
        loss = criterion(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.)
        optimizer.step()
        print('step:', step, 'loss:', loss.item())


# CPU smoke run: small network
main(['--layers', '2', '--unrolled'])
