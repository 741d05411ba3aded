# expect: freed_graph
# source: https://github.com/chxy95/Deep-Mutual-Learning/issues/5
"""Online (mutual) knowledge distillation between a cohort of small CNNs.

Each peer is trained with cross-entropy plus a temperature-scaled KL term
towards the averaged predictions of the other peers, and every peer owns
its own optimizer and learning-rate schedule.
"""
import copy
import logging
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

log = logging.getLogger("dml")
logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")

CONFIG = {
    "data": {"num_classes": 5, "image_size": 12, "channels": 3, "batch_size": 8, "num_batches": 4},
    "model": {"widths": [8, 16], "dropout": 0.1},
    "cohort": {"num_peers": 2},
    "optim": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "milestones": [3], "gamma": 0.1},
    "distill": {"temperature": 3.0, "alpha": 1.0},
    "train": {"epochs": 2, "log_every": 2},
}


class ConvBNAct(nn.Module):
    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class PeerNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        widths = cfg["model"]["widths"]
        c_in = cfg["data"]["channels"]
        stages = OrderedDict()
        for i, w in enumerate(widths):
            stages[f"stage{i}"] = nn.Sequential(ConvBNAct(c_in, w, stride=1 if i == 0 else 2),
                                                ConvBNAct(w, w))
            c_in = w
        self.stages = nn.ModuleDict(stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(cfg["model"]["dropout"])
        self.head = nn.Linear(c_in, cfg["data"]["num_classes"])

    def forward(self, x):
        for name in self.stages:
            x = self.stages[name](x)
        return self.head(self.drop(self.pool(x).flatten(1)))


class AverageMeter:
    def __init__(self):
        self.reset()

    def reset(self):
        self.sum, self.count = 0.0, 0

    def update(self, val, n=1):
        self.sum += float(val) * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(1, self.count)


def kl_to_target(logits, target_probs, temperature):
    log_p = F.log_softmax(logits / temperature, dim=1)
    return F.kl_div(log_p, target_probs, reduction="batchmean") * temperature ** 2


class Cohort:
    def __init__(self, cfg):
        self.cfg = cfg
        base = PeerNet(cfg)
        self.peers = [base] + [copy.deepcopy(base) for _ in range(cfg["cohort"]["num_peers"] - 1)]
        for k, p in enumerate(self.peers[1:], start=1):
            torch.manual_seed(100 + k)
            for m in p.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.kaiming_normal_(m.weight)
        oc = cfg["optim"]
        self.optimizers = [torch.optim.SGD(p.parameters(), lr=oc["lr"], momentum=oc["momentum"],
                                           weight_decay=oc["weight_decay"], nesterov=True)
                           for p in self.peers]
        self.schedulers = [torch.optim.lr_scheduler.MultiStepLR(o, oc["milestones"], oc["gamma"])
                           for o in self.optimizers]
        self._logits = []

    def forward_all(self, x):
        self._logits = [p(x) for p in self.peers]
        return self._logits

    @property
    def soft_targets(self):
        t = self.cfg["distill"]["temperature"]
        return [F.softmax(logits / t, dim=1) for logits in self._logits]

    def peer_loss(self, i, targets):
        t = self.cfg["distill"]["temperature"]
        alpha = self.cfg["distill"]["alpha"]
        soft = self.soft_targets
        ce = F.cross_entropy(self._logits[i], targets)
        others = [j for j in range(len(self.peers)) if j != i]
        kl = sum(kl_to_target(self._logits[i], soft[j], t) for j in others) / len(others)
        return ce + alpha * kl, ce.detach(), kl.detach()

    def train_step(self, x, y, meters):
        for p in self.peers:
            p.train()
        self.forward_all(x)
        for i, opt in enumerate(self.optimizers):
            loss, ce, kl = self.peer_loss(i, y)
            opt.zero_grad()
            loss.backward()  # raises
            opt.step()
            meters[i]["ce"].update(ce.item(), x.size(0))
            meters[i]["kl"].update(kl.item(), x.size(0))

    @torch.no_grad()
    def evaluate(self, batches):
        accs = []
        for p in self.peers:
            p.eval()
            correct = total = 0
            for x, y in batches:
                correct += (p(x).argmax(1) == y).sum().item()
                total += y.numel()
            accs.append(correct / total)
        return accs


def make_batches(cfg, seed):
    rng = np.random.RandomState(seed)
    d = cfg["data"]
    out = []
    for _ in range(d["num_batches"]):
        x = rng.randn(d["batch_size"], d["channels"], d["image_size"], d["image_size"]).astype(np.float32)
        y = rng.randint(0, d["num_classes"], size=d["batch_size"])
        x[np.arange(len(y)), y % d["channels"]] += 1.0
        out.append((torch.from_numpy(x), torch.from_numpy(y).long()))
    return out


def main():
    torch.manual_seed(0)
    cfg = CONFIG
    cohort = Cohort(cfg)
    train, val = make_batches(cfg, 0), make_batches(cfg, 1)
    for epoch in range(cfg["train"]["epochs"]):
        meters = [{"ce": AverageMeter(), "kl": AverageMeter()} for _ in cohort.peers]
        for it, (x, y) in enumerate(train):
            cohort.train_step(x, y, meters)
            if it % cfg["train"]["log_every"] == 0:
                msg = " ".join(f"p{i}: ce={m['ce'].avg:.3f} kl={m['kl'].avg:.3f}" for i, m in enumerate(meters))
                log.info("epoch %d it %d %s", epoch, it, msg)
        for s in cohort.schedulers:
            s.step()
        log.info("epoch %d val acc %s", epoch, cohort.evaluate(val))


if __name__ == "__main__":
    main()
