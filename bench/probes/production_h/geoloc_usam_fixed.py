# expect: clean
# source: https://github.com/AggMan96/RK-Net/issues/9
"""Cross-view geo-localisation (drone <-> satellite) with a shared backbone,
unit-subtraction attention (USAM) keypoint maps, GeM pooling and per-view
bottleneck classifiers, trained on a synthetic University-1652-style set."""
import argparse
import copy
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import init
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
np.random.seed(0)


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--nclasses", type=int, default=8)
    p.add_argument("--drone_per_class", type=int, default=6)
    p.add_argument("--img", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--droprate", type=float, default=0.5)
    p.add_argument("--share", action="store_true", default=True)
    p.add_argument("--usam", action="store_true", default=True)
    p.add_argument("--polish", action="store_true", default=True)
    p.add_argument("--ema", type=float, default=0.99)
    return p.parse_args(argv or [])


class USAM(nn.Module):
    def __init__(self, kernel_size=3, padding=1, polish=True):
        super().__init__()
        kernel = torch.ones((kernel_size, kernel_size)).unsqueeze(0).unsqueeze(0)
        self.weight = nn.Parameter(data=kernel, requires_grad=False)
        kernel2 = (torch.ones((1, 1)) * (kernel_size * kernel_size)).unsqueeze(0).unsqueeze(0)
        self.weight2 = nn.Parameter(data=kernel2, requires_grad=False)
        self.polish = polish
        self.pad = padding
        self.relu = nn.ReLU()
        self.bn = nn.BatchNorm2d(1)

    def __call__(self, x):
        fmap = x.sum(1, keepdim=True)
        x1 = F.conv2d(fmap, self.weight, padding=self.pad)
        x2 = F.conv2d(fmap, self.weight2, padding=0)
        att = x2 - x1
        att = self.bn(att)
        att = self.relu(att)
        if self.polish:
            att = att.clone()
            att[:, :, :, 0] = 0
            att[:, :, :, -1] = 0
            att[:, :, 0, :] = 0
            att[:, :, -1, :] = 0
        output = x + att * x
        return output


class GeM(nn.Module):
    def __init__(self, dim=128, p=3, eps=1e-6):
        super().__init__()
        self.p = nn.Parameter(torch.ones(dim) * p)
        self.eps = eps

    def forward(self, x):
        x = torch.transpose(x, 1, -1)
        x = x.clamp(min=self.eps).pow(self.p)
        x = torch.transpose(x, 1, -1)
        x = F.avg_pool2d(x, (x.size(-2), x.size(-1))).view(x.size(0), x.size(1))
        return x.pow(1.0 / self.p)


def weights_init_kaiming(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        init.kaiming_normal_(m.weight.data, a=0, mode="fan_in")
    elif classname.find("Linear") != -1:
        init.kaiming_normal_(m.weight.data, a=0, mode="fan_out")
        init.constant_(m.bias.data, 0.0)
    elif classname.find("BatchNorm1d") != -1:
        init.normal_(m.weight.data, 1.0, 0.02)
        init.constant_(m.bias.data, 0.0)


def weights_init_classifier(m):
    if m.__class__.__name__.find("Linear") != -1:
        init.normal_(m.weight.data, std=0.001)
        init.constant_(m.bias.data, 0.0)


class ClassBlock(nn.Module):
    def __init__(self, input_dim, class_num, droprate, num_bottleneck=64):
        super().__init__()
        self.add_block = nn.Sequential(nn.Linear(input_dim, num_bottleneck), nn.BatchNorm1d(num_bottleneck),
                                       nn.Dropout(p=droprate))
        self.add_block.apply(weights_init_kaiming)
        self.classifier = nn.Sequential(nn.Linear(num_bottleneck, class_num))
        self.classifier.apply(weights_init_classifier)

    def forward(self, x):
        f = self.add_block(x)
        return self.classifier(f), f


class Backbone(nn.Module):
    def __init__(self, opt):
        super().__init__()

        def stage(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(), nn.MaxPool2d(2))

        self.stages = nn.ModuleList([stage(3, 32), stage(32, 64), stage(64, 128)])
        self.att = nn.ModuleList([USAM(polish=opt.polish) if opt.usam else nn.Identity() for _ in range(3)])
        self.apply(weights_init_kaiming)

    def forward(self, x):
        for s, a in zip(self.stages, self.att):
            x = a(s(x))
        return x


class TwoViewNet(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.model_1 = Backbone(opt)
        self.model_2 = self.model_1 if opt.share else Backbone(opt)
        self.pool = GeM(128)
        self.classifier = ClassBlock(128, opt.nclasses, opt.droprate)

    def forward(self, x1, x2):
        y1 = self.classifier(self.pool(self.model_1(x1))) if x1 is not None else None
        y2 = self.classifier(self.pool(self.model_2(x2))) if x2 is not None else None
        return y1, y2


class CrossViewSet(Dataset):
    def __init__(self, opt):
        g = torch.Generator().manual_seed(1)
        self.templates = torch.rand(opt.nclasses, 3, opt.img, opt.img, generator=g)
        self.items = [(c, k) for c in range(opt.nclasses) for k in range(opt.drone_per_class)]
        self.opt = opt

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        c, k = self.items[i]
        sat = self.templates[c] + 0.05 * torch.randn_like(self.templates[c])
        drone = torch.roll(self.templates[c], shifts=(k % 3, k // 3), dims=(1, 2)) * (0.8 + 0.05 * k)
        drone = drone + 0.1 * torch.randn_like(drone)
        return sat, drone, c


def update_ema(ema_model, model, decay):
    with torch.no_grad():
        for pe, p in zip(ema_model.parameters(), model.parameters()):
            pe.mul_(decay).add_(p.detach(), alpha=1 - decay)


@torch.no_grad()
def recall_at_1(model, loader):
    model.eval()
    sats, drones, labels = [], [], []
    for sat, drone, c in loader:
        (_, fs), (_, fd) = model(sat, drone)
        sats.append(F.normalize(fs, dim=1)); drones.append(F.normalize(fd, dim=1)); labels.append(c)
    s, d, y = torch.cat(sats), torch.cat(drones), torch.cat(labels)
    pred = y[(d @ s.t()).argmax(1)]
    model.train()
    return (pred == y).float().mean().item()


def main():
    opt = get_args()
    ds = CrossViewSet(opt)
    loader = DataLoader(ds, batch_size=opt.batch, shuffle=True, drop_last=True)
    model = TwoViewNet(opt)
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    ignored = list(map(id, model.classifier.parameters()))
    base_params = [p for p in model.parameters() if id(p) not in ignored and p.requires_grad]
    optimizer = torch.optim.SGD([{"params": base_params, "lr": 0.1 * opt.lr},
                                 {"params": model.classifier.parameters(), "lr": opt.lr}],
                                momentum=0.9, weight_decay=5e-4, nesterov=True)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1], gamma=0.1)
    criterion = nn.CrossEntropyLoss()
    t0 = time.time()
    for epoch in range(opt.epochs):
        running, seen = 0.0, 0
        for sat, drone, label in loader:
            optimizer.zero_grad()
            (logit_s, _), (logit_d, _) = model(sat, drone)
            loss = criterion(logit_s, label) + criterion(logit_d, label)
            loss.backward()
            optimizer.step()
            update_ema(ema, model, opt.ema)
            running += loss.item() * label.size(0)
            seen += label.size(0)
        scheduler.step()
        print(f"epoch {epoch} loss {running / seen:.4f} R@1 {recall_at_1(model, loader):.3f} "
              f"ema R@1 {recall_at_1(ema, loader):.3f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
