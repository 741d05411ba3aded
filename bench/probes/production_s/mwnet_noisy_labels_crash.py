# expect: freed_graph
# source: https://github.com/xjtushujun/meta-weight-net/issues/8
"""Meta-Weight-Net training on noisy labels with a MetaModule ResNet.

The classifier is built from MetaModule layers (weights kept as buffers so a
differentiable "virtual" SGD step can be taken with `update_params`).  Each
iteration clones the classifier into a meta model, takes one look-ahead step on
the V-Net-weighted training loss, evaluates the look-ahead model on a clean
meta batch to update V-Net, and then updates the real classifier with the
re-weighted loss.  Synthetic CIFAR-like data with 40% uniform label noise.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def to_var(x, requires_grad=True):
    return x.clone().requires_grad_(requires_grad)


class MetaModule(nn.Module):
    def params(self):
        for _, param in self.named_params(self):
            yield param

    def named_params(self, curr_module=None, memo=None, prefix=""):
        memo = set() if memo is None else memo
        items = curr_module.named_leaves() if hasattr(curr_module, "named_leaves") else curr_module._parameters.items()
        for name, p in items:
            if p is not None and p not in memo:
                memo.add(p)
                yield prefix + ("." if prefix else "") + name, p
        for mname, module in curr_module.named_children():
            yield from self.named_params(module, memo, prefix + ("." if prefix else "") + mname)

    def update_params(self, lr_inner, first_order=False, source_params=None):
        for (name_t, param_t), grad in zip(self.named_params(self), source_params):
            if first_order:
                grad = to_var(grad.detach())
            self.set_param(self, name_t, param_t - lr_inner * grad)

    def set_param(self, curr_mod, name, param):
        if "." in name:
            module_name, rest = name.split(".", 1)
            for child_name, mod in curr_mod.named_children():
                if child_name == module_name:
                    self.set_param(mod, rest, param)
                    break
        else:
            setattr(curr_mod, name, param)

    def named_leaves(self):
        return []


class MetaLinear(MetaModule):
    def __init__(self, *args, **kwargs):
        super().__init__()
        ignore = nn.Linear(*args, **kwargs)
        self.register_buffer("weight", to_var(ignore.weight.data))
        self.register_buffer("bias", to_var(ignore.bias.data))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def named_leaves(self):
        return [("weight", self.weight), ("bias", self.bias)]


class MetaConv2d(MetaModule):
    def __init__(self, *args, **kwargs):
        super().__init__()
        ignore = nn.Conv2d(*args, **kwargs)
        self.stride, self.padding = ignore.stride, ignore.padding
        nn.init.kaiming_normal_(ignore.weight)
        self.register_buffer("weight", to_var(ignore.weight.data))
        self.register_buffer("bias", None)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def named_leaves(self):
        return [("weight", self.weight)]


class MetaBatchNorm2d(MetaModule):
    def __init__(self, num_features):
        super().__init__()
        self.register_buffer("weight", to_var(torch.ones(num_features)))
        self.register_buffer("bias", to_var(torch.zeros(num_features)))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training, 0.1, 1e-5)

    def named_leaves(self):
        return [("weight", self.weight), ("bias", self.bias)]


class BasicBlock(MetaModule):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = MetaConv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = MetaBatchNorm2d(planes)
        self.conv2 = MetaConv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = MetaBatchNorm2d(planes)
        self.pad = planes - in_planes
        self.stride = stride

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x[:, :, ::self.stride, ::self.stride]
        if self.pad:
            shortcut = F.pad(shortcut, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + shortcut)


class ResNet(MetaModule):
    def __init__(self, num_classes=10, widths=(8, 16, 32)):
        super().__init__()
        self.conv1 = MetaConv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = MetaBatchNorm2d(widths[0])
        ins = (widths[0],) + widths[:-1]
        self.layers = nn.Sequential(*[BasicBlock(i, o, 1 if k == 0 else 2) for k, (i, o) in enumerate(zip(ins, widths))])
        self.linear = MetaLinear(widths[-1], num_classes)

    def forward(self, x):
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))


class VNet(MetaModule):
    def __init__(self, input, hidden1, output):
        super().__init__()
        self.linear1 = MetaLinear(input, hidden1)
        self.relu1 = nn.ReLU(inplace=True)
        self.linear2 = MetaLinear(hidden1, output)

    def forward(self, x):
        return torch.sigmoid(self.linear2(self.relu1(self.linear1(x))))


def build_model(args):
    return ResNet(args.num_classes)


def meta_lr_at(args, epoch):
    return args.lr * ((0.1 ** int(epoch >= 80)) * (0.1 ** int(epoch >= 100)))


def pseudo_update(args, model, meta_model, vnet, inputs, targets, epoch):
    """One differentiable look-ahead SGD step on the V-Net weighted loss."""
    outputs = meta_model(inputs)
    cost = F.cross_entropy(outputs, targets, reduction="none")
    cost_v = torch.reshape(cost, (len(cost), 1))
    v_lambda = vnet(cost_v.data)
    l_f_meta = torch.sum(cost_v * v_lambda) / len(cost_v)
    meta_model.zero_grad()
    grads = torch.autograd.grad(l_f_meta, meta_model.params(), create_graph=True)
    model.update_params(lr_inner=meta_lr_at(args, epoch), source_params=grads)


def accuracy(output, target):
    return 100.0 * (output.argmax(1) == target).float().mean().item()


def train(args, train_loader, meta_loader, model, vnet, optimizer_model, optimizer_vnet, epoch):
    train_loss = meta_loss = 0.0
    meta_iter = iter(meta_loader)
    for batch_idx, (inputs, targets) in enumerate(train_loader):
        model.train()
        meta_model = build_model(args)
        meta_model.load_state_dict(model.state_dict())
        pseudo_update(args, model, meta_model, vnet, inputs, targets, epoch)

        try:
            inputs_val, targets_val = next(meta_iter)
        except StopIteration:
            meta_iter = iter(meta_loader)
            inputs_val, targets_val = next(meta_iter)
        y_g_hat = meta_model(inputs_val)
        l_g_meta = F.cross_entropy(y_g_hat, targets_val)
        optimizer_vnet.zero_grad()
        l_g_meta.backward()
        optimizer_vnet.step()

        outputs = model(inputs)
        cost_w = F.cross_entropy(outputs, targets, reduction="none")
        cost_v = torch.reshape(cost_w, (len(cost_w), 1))
        with torch.no_grad():
            w_new = vnet(cost_v)
        loss = torch.sum(cost_v * w_new) / len(cost_v)
        optimizer_model.zero_grad()
        loss.backward()  # raises
        optimizer_model.step()

        train_loss += loss.item()
        meta_loss += l_g_meta.item()
        if (batch_idx + 1) % args.print_freq == 0:
            print("Epoch: [%d/%d]\tIters: [%d]\tLoss: %.4f\tMetaLoss: %.4f\tPrec@1 %.2f" % (
                epoch + 1, args.epochs, batch_idx + 1, train_loss / (batch_idx + 1),
                meta_loss / (batch_idx + 1), accuracy(outputs.data, targets)))


@torch.no_grad()
def test(model, loader):
    model.eval()
    correct = total = 0
    for inputs, targets in loader:
        correct += (model(inputs).argmax(1) == targets).sum().item()
        total += targets.size(0)
    print("Test accuracy: %.2f%%" % (100.0 * correct / total))
    return 100.0 * correct / total


def build_dataset(args):
    rng = np.random.RandomState(args.seed)
    x = torch.from_numpy(rng.randn(args.n_train + args.num_meta + 64, 3, 16, 16).astype(np.float32))
    y = torch.from_numpy(rng.randint(0, args.num_classes, len(x)))
    noisy = y.clone()
    flip = torch.from_numpy(rng.rand(args.n_train) < args.corruption_prob)
    noisy[:args.n_train][flip] = torch.from_numpy(rng.randint(0, args.num_classes, int(flip.sum())))
    train = TensorDataset(x[:args.n_train], noisy[:args.n_train])
    meta = TensorDataset(x[args.n_train:args.n_train + args.num_meta], y[args.n_train:args.n_train + args.num_meta])
    test_set = TensorDataset(x[-64:], y[-64:])
    return (DataLoader(train, batch_size=args.batch_size, shuffle=True),
            DataLoader(meta, batch_size=args.batch_size, shuffle=True),
            DataLoader(test_set, batch_size=args.batch_size))


def main():
    args = argparse.Namespace(num_classes=10, n_train=96, num_meta=32, corruption_prob=0.4, batch_size=16,
                              epochs=2, lr=0.1, momentum=0.9, weight_decay=5e-4, print_freq=2, seed=1)
    torch.manual_seed(args.seed)
    train_loader, meta_loader, test_loader = build_dataset(args)
    model = build_model(args)
    vnet = VNet(1, 100, 1)
    optimizer_model = torch.optim.SGD(model.params(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    optimizer_vnet = torch.optim.Adam(vnet.params(), 1e-3, weight_decay=1e-4)
    best_acc = 0
    for epoch in range(args.epochs):
        for group in optimizer_model.param_groups:
            group["lr"] = meta_lr_at(args, epoch)
        train(args, train_loader, meta_loader, model, vnet, optimizer_model, optimizer_vnet, epoch)
        best_acc = max(best_acc, test(model, test_loader))
    print("best accuracy:", best_acc)


if __name__ == "__main__":
    main()
