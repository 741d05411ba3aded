# expect: clean
# source: https://github.com/learnables/learn2learn/pull/93
"""Few-shot classification with MAML and an auxiliary self-supervised head.

Structured like a learn2learn-based meta-learning project: a MAML wrapper with
clone() / adapt() that takes differentiable inner-loop steps, a functional model
(forward with an explicit parameter dict) made of a conv backbone, a few-shot
classification head and a rotation-prediction head used as an auxiliary loss on
the query set, a task sampler producing N-way K-shot episodes, fast_adapt(),
and a meta-training loop with Adam, cosine LR decay, meta-batch gradient
accumulation and periodic meta-validation.  Synthetic episodes, CPU only.
"""
import argparse
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F


class FewShotNet(nn.Module):
    """Backbone + classification head + rotation head; forward takes explicit params."""

    def __init__(self, ways, hidden=16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, hidden, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden, hidden, 3, padding=1)
        self.classifier = nn.Linear(hidden, ways)
        self.rotation_head = nn.Linear(hidden, 4)

    def features(self, x, params):
        x = F.relu(F.conv2d(x, params["conv1.weight"], params["conv1.bias"], padding=1))
        x = F.max_pool2d(x, 2)
        x = F.relu(F.conv2d(x, params["conv2.weight"], params["conv2.bias"], padding=1))
        return F.adaptive_avg_pool2d(x, 1).flatten(1)

    def forward(self, x, params=None, head="classifier"):
        params = OrderedDict(self.named_parameters()) if params is None else params
        feats = self.features(x, params)
        return F.linear(feats, params[head + ".weight"], params[head + ".bias"])


class MAML:
    """Minimal MAML wrapper in the spirit of learn2learn.algorithms.MAML."""

    def __init__(self, model, lr, first_order=False, allow_unused=False, params=None):
        self.module = model
        self.lr = lr
        self.first_order = first_order
        self.allow_unused = allow_unused
        self.params = OrderedDict(model.named_parameters()) if params is None else params

    def clone(self):
        return MAML(self.module, self.lr, self.first_order, self.allow_unused,
                    OrderedDict((k, v.clone()) for k, v in self.params.items()))

    def __call__(self, x, head="classifier"):
        return self.module(x, self.params, head=head)

    def adapt(self, loss, first_order=None):
        first_order = self.first_order if first_order is None else first_order
        second_order = not first_order
        gradients = torch.autograd.grad(loss, list(self.params.values()),
                                        retain_graph=second_order, create_graph=second_order,
                                        allow_unused=self.allow_unused)
        self.params = maml_update(self.params, self.lr, gradients)


def maml_update(params, lr, grads):
    updated = OrderedDict()
    for (name, p), g in zip(params.items(), grads):
        updated[name] = p if g is None else p - lr * g
    return updated


def rotate_batch(x):
    rots = torch.randint(0, 4, (x.size(0),))
    rotated = torch.stack([torch.rot90(img, int(k), dims=(1, 2)) for img, k in zip(x, rots)])
    return rotated, rots


class TaskSampler:
    def __init__(self, ways, shots, query, image_size, seed):
        self.ways, self.shots, self.query, self.size = ways, shots, query, image_size
        self.gen = torch.Generator().manual_seed(seed)

    def sample(self):
        protos = torch.randn(self.ways, 1, self.size, self.size, generator=self.gen)
        n = self.shots + self.query
        data = protos.repeat_interleave(n, 0) + 0.3 * torch.randn(self.ways * n, 1, self.size, self.size,
                                                                   generator=self.gen)
        labels = torch.arange(self.ways).repeat_interleave(n)
        idx = torch.arange(self.ways * n).view(self.ways, n)
        s_idx, q_idx = idx[:, :self.shots].flatten(), idx[:, self.shots:].flatten()
        return data[s_idx], labels[s_idx], data[q_idx], labels[q_idx]


def accuracy(predictions, targets):
    return (predictions.argmax(dim=1) == targets).float().mean()


def fast_adapt(batch, learner, adaptation_steps, aux_weight):
    support_x, support_y, query_x, query_y = batch
    for _ in range(adaptation_steps):
        train_error = F.cross_entropy(learner(support_x), support_y)
        learner.adapt(train_error)
    predictions = learner(query_x)
    valid_error = F.cross_entropy(predictions, query_y)
    if aux_weight > 0:
        rotated, rot_labels = rotate_batch(query_x)
        valid_error = valid_error + aux_weight * F.cross_entropy(learner(rotated, head="rotation_head"), rot_labels)
    return valid_error, accuracy(predictions, query_y)


def meta_train(args):
    torch.manual_seed(args.seed)
    model = FewShotNet(args.ways)
    maml = MAML(model, lr=args.fast_lr, first_order=False, allow_unused=True)
    opt = torch.optim.Adam(model.parameters(), args.meta_lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.num_iterations)
    train_tasks = TaskSampler(args.ways, args.shots, args.query, args.image_size, args.seed)
    valid_tasks = TaskSampler(args.ways, args.shots, args.query, args.image_size, args.seed + 1)
    for iteration in range(args.num_iterations):
        opt.zero_grad()
        meta_train_error, meta_train_accuracy = 0.0, 0.0
        for _ in range(args.meta_batch_size):
            learner = maml.clone()
            evaluation_error, evaluation_accuracy = fast_adapt(train_tasks.sample(), learner,
                                                               args.adaptation_steps, args.aux_weight)
            evaluation_error.backward()
            meta_train_error += evaluation_error.item()
            meta_train_accuracy += evaluation_accuracy.item()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.data.mul_(1.0 / args.meta_batch_size)
        opt.step()
        sched.step()
        print("iter %d  meta-train error %.4f acc %.3f" % (iteration, meta_train_error / args.meta_batch_size,
                                                           meta_train_accuracy / args.meta_batch_size))
        if (iteration + 1) % args.eval_every == 0:
            learner = maml.clone()
            err, acc = fast_adapt(valid_tasks.sample(), learner, args.adaptation_steps, 0.0)
            print("  meta-valid error %.4f acc %.3f" % (err.item(), acc.item()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ways", type=int, default=3)
    p.add_argument("--shots", type=int, default=2)
    p.add_argument("--query", type=int, default=3)
    p.add_argument("--image_size", type=int, default=12)
    p.add_argument("--meta_lr", type=float, default=3e-3)
    p.add_argument("--fast_lr", type=float, default=0.4)
    p.add_argument("--meta_batch_size", type=int, default=2)
    p.add_argument("--adaptation_steps", type=int, default=1)
    p.add_argument("--aux_weight", type=float, default=0.5)
    p.add_argument("--num_iterations", type=int, default=4)
    p.add_argument("--eval_every", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    meta_train(p.parse_args([]))


if __name__ == "__main__":
    main()
