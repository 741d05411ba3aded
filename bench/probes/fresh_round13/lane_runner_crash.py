# expect: nonscalar_backward
# source: https://github.com/Turoad/lanedet/issues/78
"""Lane-detection training runner (lanedet-style) on two devices.

Models are built from a config through a registry; the detector computes
its own loss inside forward and returns an output dict.  The runner wraps
the net for multi-device execution: on this CPU-only setup `MultiDeviceNet`
stands in for torch.nn.DataParallel(net, device_ids=gpus), scattering the
batch and gathering each replica's outputs along dim 0.
"""
import time
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

NETS = {}


def register(name):
    def deco(cls):
        NETS[name] = cls
        return cls
    return deco


class Config(dict):
    __getattr__ = dict.__getitem__


cfg = Config(
    net=Config(type="RESANet", in_ch=3, feat_ch=16, num_lanes=4),
    img_h=32, img_w=64, batch_size=8, epochs=2, iters_per_epoch=4,
    lr=1e-3, gpus=[0, 1], log_interval=2, seed=0,
)


@register("RESANet")
class RESANet(nn.Module):
    def __init__(self, in_ch, feat_ch, num_lanes):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(in_ch, feat_ch, 3, 2, 1), nn.BatchNorm2d(feat_ch), nn.ReLU(),
            nn.Conv2d(feat_ch, feat_ch, 3, 2, 1), nn.BatchNorm2d(feat_ch), nn.ReLU())
        self.resa = nn.Conv2d(feat_ch, feat_ch, (1, 9), padding=(0, 4))
        self.seg_head = nn.Conv2d(feat_ch, num_lanes + 1, 1)
        self.exist_head = nn.Linear(feat_ch, num_lanes)

    def forward(self, batch):
        feat = self.backbone(batch["img"])
        feat = feat + F.relu(self.resa(feat))
        seg = F.interpolate(self.seg_head(feat), size=batch["img"].shape[-2:], mode="bilinear", align_corners=False)
        exist = self.exist_head(feat.mean((2, 3)))
        output = {"seg": seg, "exist": exist}
        if self.training:
            seg_loss = F.cross_entropy(seg, batch["label"])
            exist_loss = F.binary_cross_entropy_with_logits(exist, batch["exist"])
            output["loss"] = seg_loss + 0.1 * exist_loss
            output["loss_stats"] = {"seg_loss": seg_loss.detach(), "exist_loss": exist_loss.detach()}
        return output


class MultiDeviceNet(nn.Module):
    def __init__(self, module, device_ids):
        super().__init__()
        self.module, self.device_ids = module, device_ids

    def forward(self, batch):
        n = len(self.device_ids)
        chunks = [{k: v.chunk(n)[i] for k, v in batch.items()} for i in range(n)]
        outs = [self.module(c) for c in chunks]
        gathered = {}
        for key in outs[0]:
            if key == "loss_stats":
                gathered[key] = {k: torch.stack([o[key][k] for o in outs]) for k in outs[0][key]}
            elif outs[0][key].dim() == 0:
                gathered[key] = torch.stack([o[key] for o in outs])
            else:
                gathered[key] = torch.cat([o[key] for o in outs])
        return gathered


def build_net(cfg):
    args = dict(cfg.net)
    return NETS[args.pop("type")](**args)


class SyntheticLanes:
    def __init__(self, cfg):
        self.cfg = cfg
        self.g = torch.Generator().manual_seed(cfg.seed)

    def __iter__(self):
        c = self.cfg
        for _ in range(c.iters_per_epoch):
            yield {
                "img": torch.rand(c.batch_size, 3, c.img_h, c.img_w, generator=self.g),
                "label": torch.randint(0, c.net.num_lanes + 1, (c.batch_size, c.img_h, c.img_w), generator=self.g),
                "exist": torch.randint(0, 2, (c.batch_size, c.net.num_lanes), generator=self.g).float(),
            }


class Recorder:
    def __init__(self):
        self.meters = defaultdict(list)
        self.step = 0

    def update(self, stats):
        for k, v in stats.items():
            self.meters[k].append(float(v.mean()))

    def log(self, epoch):
        msg = " ".join(f"{k}={sum(v[-5:]) / len(v[-5:]):.4f}" for k, v in self.meters.items())
        print(f"epoch {epoch} step {self.step} {msg}")


class Runner:
    def __init__(self, cfg):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.net = MultiDeviceNet(build_net(cfg), device_ids=cfg.gpus)
        self.optimizer = torch.optim.AdamW(self.net.parameters(), lr=cfg.lr)
        self.recorder = Recorder()

    def train_epoch(self, epoch, train_loader):
        self.net.train()
        end = time.time()
        for i, data in enumerate(train_loader):
            output = self.net(data)
            self.optimizer.zero_grad()
            loss = output["loss"]
            loss.backward()  # raises
            self.optimizer.step()
            self.recorder.step += 1
            self.recorder.update(output["loss_stats"])
            if i % self.cfg.log_interval == 0:
                self.recorder.log(epoch)
        return time.time() - end

    def train(self):
        loader = SyntheticLanes(self.cfg)
        for epoch in range(self.cfg.epochs):
            self.train_epoch(epoch, loader)


def main():
    Runner(cfg).train()


if __name__ == "__main__":
    main()
