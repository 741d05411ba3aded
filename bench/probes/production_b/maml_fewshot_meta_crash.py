# expect: no_grad_fn
# source: https://github.com/dragen1860/MAML-Pytorch/issues/40
"""Second-order MAML for N-way K-shot classification.

The learner is written functionally (explicit parameter lists) so the
inner loop can differentiate through fast weights produced by
``torch.autograd.grad``.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Learner(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.vars = nn.ParameterList()
        self.vars_bn = nn.ParameterList()
        for name, param in config:
            if name == "conv2d":
                w = nn.Parameter(torch.ones(*param[:4]))
                nn.init.kaiming_normal_(w)
                self.vars.append(w)
                self.vars.append(nn.Parameter(torch.zeros(param[0])))
            elif name == "linear":
                w = nn.Parameter(torch.ones(*param))
                nn.init.kaiming_normal_(w)
                self.vars.append(w)
                self.vars.append(nn.Parameter(torch.zeros(param[0])))
            elif name == "bn":
                self.vars.append(nn.Parameter(torch.ones(param[0])))
                self.vars.append(nn.Parameter(torch.zeros(param[0])))
                self.vars_bn.extend([nn.Parameter(torch.zeros(param[0]), requires_grad=False),
                                     nn.Parameter(torch.ones(param[0]), requires_grad=False)])
            elif name in ("relu", "flatten", "max_pool2d"):
                continue
            else:
                raise NotImplementedError(name)

    def forward(self, x, vars=None, bn_training=True):
        if vars is None:
            vars = self.vars
        idx, bn_idx = 0, 0
        for name, param in self.config:
            if name == "conv2d":
                w, b = vars[idx], vars[idx + 1]
                x = F.conv2d(x, w, b, stride=param[4], padding=param[5])
                idx += 2
            elif name == "linear":
                w, b = vars[idx], vars[idx + 1]
                x = F.linear(x, w, b)
                idx += 2
            elif name == "bn":
                w, b = vars[idx], vars[idx + 1]
                running_mean, running_var = self.vars_bn[bn_idx], self.vars_bn[bn_idx + 1]
                x = F.batch_norm(x, running_mean, running_var, weight=w, bias=b, training=bn_training)
                idx += 2
                bn_idx += 2
            elif name == "flatten":
                x = x.view(x.size(0), -1)
            elif name == "relu":
                x = F.relu(x, inplace=param[0])
            elif name == "max_pool2d":
                x = F.max_pool2d(x, param[0], param[1], param[2])
        assert idx == len(vars)
        return x

    def parameters(self, recurse=True):
        return self.vars


class Meta(nn.Module):
    def __init__(self, args, config):
        super().__init__()
        self.update_lr = args.update_lr
        self.meta_lr = args.meta_lr
        self.n_way = args.n_way
        self.k_spt = args.k_spt
        self.k_qry = args.k_qry
        self.task_num = args.task_num
        self.update_step = args.update_step
        self.update_step_test = args.update_step_test
        self.net = Learner(config)
        self.meta_optim = torch.optim.Adam(self.net.parameters(), lr=self.meta_lr)

    def forward(self, x_spt, y_spt, x_qry, y_qry):
        task_num = x_spt.size(0)
        querysz = x_qry.size(1)
        losses_q = [0 for _ in range(self.update_step + 1)]
        corrects = [0 for _ in range(self.update_step + 1)]

        for i in range(task_num):
            logits = self.net(x_spt[i], vars=None, bn_training=True)
            loss = F.cross_entropy(logits, y_spt[i])
            grad = torch.autograd.grad(loss, self.net.parameters(), create_graph=True)
            fast_weights = [p - self.update_lr * g for g, p in zip(grad, self.net.parameters())]

            with torch.no_grad():
                logits_q = self.net(x_qry[i], self.net.parameters(), bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[0] += loss_q
                corrects[0] += (logits_q.argmax(1) == y_qry[i]).sum().item()

            with torch.no_grad():
                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[1] += loss_q
                corrects[1] += (logits_q.argmax(1) == y_qry[i]).sum().item()

            for k in range(1, self.update_step):
                logits = self.net(x_spt[i], fast_weights, bn_training=True)
                loss = F.cross_entropy(logits, y_spt[i])
                grad = torch.autograd.grad(loss, fast_weights, create_graph=True)
                fast_weights = [p - self.update_lr * g for g, p in zip(grad, fast_weights)]
                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[k + 1] += loss_q
                corrects[k + 1] += (logits_q.argmax(1) == y_qry[i]).sum().item()

        loss_q = losses_q[-1] / task_num
        self.meta_optim.zero_grad()
        loss_q.backward()  # raises
        self.meta_optim.step()
        return np.array(corrects) / (querysz * task_num)


def sample_tasks(args, rng, protos):
    def draw(k, classes):
        xs, ys = [], []
        for label, c in enumerate(classes):
            base = protos[c]
            xs.append(base[None] + 0.4 * rng.randn(k, *base.shape))
            ys.append(np.full(k, label))
        return np.concatenate(xs), np.concatenate(ys)

    batch = {"x_spt": [], "y_spt": [], "x_qry": [], "y_qry": []}
    for _ in range(args.task_num):
        classes = rng.choice(len(protos), args.n_way, replace=False)
        xs, ys = draw(args.k_spt, classes)
        xq, yq = draw(args.k_qry, classes)
        batch["x_spt"].append(xs); batch["y_spt"].append(ys)
        batch["x_qry"].append(xq); batch["y_qry"].append(yq)
    to_t = lambda a, dt: torch.tensor(np.stack(a), dtype=dt)
    return (to_t(batch["x_spt"], torch.float32), to_t(batch["y_spt"], torch.long),
            to_t(batch["x_qry"], torch.float32), to_t(batch["y_qry"], torch.long))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epoch", type=int, default=3)
    parser.add_argument("--n_way", type=int, default=3)
    parser.add_argument("--k_spt", type=int, default=2)
    parser.add_argument("--k_qry", type=int, default=4)
    parser.add_argument("--imgsz", type=int, default=14)
    parser.add_argument("--task_num", type=int, default=2)
    parser.add_argument("--meta_lr", type=float, default=1e-3)
    parser.add_argument("--update_lr", type=float, default=0.4)
    parser.add_argument("--update_step", type=int, default=1)
    parser.add_argument("--update_step_test", type=int, default=3)
    args = parser.parse_args(argv or [])

    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    config = [
        ("conv2d", [16, 1, 3, 3, 2, 0]), ("relu", [True]), ("bn", [16]),
        ("conv2d", [16, 16, 3, 3, 2, 0]), ("relu", [True]), ("bn", [16]),
        ("flatten", []), ("linear", [args.n_way, 16 * 2 * 2]),
    ]
    maml = Meta(args, config)
    n_params = sum(p.numel() for p in maml.net.parameters() if p.requires_grad)
    print(args)
    print("Total trainable tensors:", n_params)
    protos = rng.randn(10, 1, args.imgsz, args.imgsz).astype(np.float32)
    for step in range(args.epoch):
        x_spt, y_spt, x_qry, y_qry = sample_tasks(args, rng, protos)
        accs = maml(x_spt, y_spt, x_qry, y_qry)
        print("step:", step, "\ttraining acc:", np.round(accs, 3))


if __name__ == "__main__":
    main()
