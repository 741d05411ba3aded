# expect: clean
# source: https://github.com/learnables/learn2learn/issues/271
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def clone_module(module, memo=None):
    """Differentiable copy of `module`: the clone's parameters are `param.clone()`."""
    if memo is None:
        memo = {}
    if not isinstance(module, nn.Module):
        return module
    clone = module.__new__(type(module))
    clone.__dict__ = module.__dict__.copy()
    clone._parameters = clone._parameters.copy()
    clone._buffers = clone._buffers.copy()
    clone._modules = clone._modules.copy()
    for key, param in module._parameters.items():
        if param is None:
            continue
        if param.data_ptr() in memo:
            clone._parameters[key] = memo[param.data_ptr()]
        else:
            cloned = param.clone()
            clone._parameters[key] = cloned
            memo[param.data_ptr()] = cloned
    for key in clone._modules:
        clone._modules[key] = clone_module(module._modules[key], memo=memo)
    return clone


def _param_slots(module):
    seen, slots = set(), []
    for mod in module.modules():
        for key, p in mod._parameters.items():
            if p is None or id(p) in seen:
                continue
            seen.add(id(p))
            slots.append((mod, key))
    return slots


def update_module(module, updates):
    for (mod, key), upd in zip(_param_slots(module), updates):
        if upd is not None:
            mod._parameters[key] = mod._parameters[key] + upd
    return module


class MAML(nn.Module):
    def __init__(self, model, lr, first_order=False):
        super().__init__()
        self.module = model
        self.lr = lr
        self.first_order = first_order

    def __getattr__(self, attr):
        try:
            return super().__getattr__(attr)
        except AttributeError:
            return getattr(self.__dict__["_modules"]["module"], attr)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def clone(self):
        return MAML(clone_module(self.module), lr=self.lr, first_order=self.first_order)

    def adapt(self, loss):
        params = list(self.module.parameters())
        diff = [p for p in params if p.requires_grad]
        grads = iter(torch.autograd.grad(loss, diff, create_graph=not self.first_order))
        updates = [-self.lr * next(grads) if p.requires_grad else None for p in params]
        self.module = update_module(self.module, updates)


class SRNet(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.head = nn.Conv2d(1, ch, 3, padding=1)
        self.meta_block = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1), nn.ReLU(),
                                        nn.Conv2d(ch, ch, 3, padding=1))
        self.tail = nn.Conv2d(ch, 4, 3, padding=1)

    def forward(self, x):
        h = F.relu(self.head(x))
        h = h + self.meta_block(h)
        return F.pixel_shuffle(self.tail(h), 2)


def sample_task(batch, size, gen):
    gt = F.avg_pool2d(torch.rand(batch, 1, size * 2 + 2, size * 2 + 2, generator=gen), 3, stride=1)
    noise_level = 0.05 * torch.rand(1, generator=gen).item()
    low_res = F.avg_pool2d(gt, 2) + noise_level * torch.randn(batch, 1, size, size, generator=gen)
    return (low_res[: batch // 2], gt[: batch // 2]), (low_res[batch // 2:], gt[batch // 2:])


def main(args):
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    maml = MAML(SRNet(), lr=args.fast_lr, first_order=False)
    # Freeze parameter
    for name, p in maml.meta_block.named_parameters():
        p.requires_grad = False
    opt = torch.optim.Adam(maml.parameters(), lr=args.meta_lr)
    l1_loss = nn.L1Loss()

    for iteration in range(args.iterations):
        opt.zero_grad()
        meta_loss = 0.0
        for _ in range(args.tasks_per_batch):
            (low_res, gt), (low_res_q, gt_q) = sample_task(args.shots * 2, args.size, gen)
            task_model = maml.clone()
            output = task_model(low_res)
            adaptation_loss = l1_loss(gt, output)
            task_model.adapt(adaptation_loss)
            adapted_output = task_model(low_res_q)
            evaluation_loss = l1_loss(gt_q, adapted_output)
            evaluation_loss.backward()
            meta_loss += evaluation_loss.item()
        for p in maml.parameters():
            if p.grad is not None:
                p.grad.mul_(1.0 / args.tasks_per_batch)
        opt.step()
        print(f"iter {iteration}: meta loss {meta_loss / args.tasks_per_batch:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--tasks-per-batch", type=int, default=2)
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--fast-lr", type=float, default=0.05)
    parser.add_argument("--meta-lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    main(parser.parse_args([]))
