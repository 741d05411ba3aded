# expect: clean
# source: https://github.com/ZYB0726/MKDNet/issues/4
"""RGB-T tracker training (DiMP-style) with a feature discriminator.

Structure follows the pytracking `ltr` layout used by MKDNet: a settings
object, a DiMP-like network (shared backbone for the RGB and thermal
branches, target classifier, IoU head) that also owns a feature
discriminator `feat_D2`, an actor that turns a data batch into the tracker
loss, the discriminator loss and stats, and an LTRTrainer that cycles a
loader and steps two optimizers with their schedulers.  Synthetic frames and
boxes, CPU.
"""
import collections

import torch
import torch.nn as nn
import torch.nn.functional as F


class Settings:
    def __init__(self):
        self.batch_size = 4
        self.image_sz = 32
        self.feature_dim = 16
        self.num_epochs = 2
        self.iters_per_epoch = 3
        self.lr = 2e-4
        self.lr_D = 1e-4
        self.print_interval = 1
        self.loss_weight = {"iou": 1.0, "test_clf": 100.0, "adv": 0.1}
        self.seed = 3


class Backbone(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.layer2 = nn.Sequential(nn.Conv2d(3, dim, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.layer3 = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1), nn.ReLU())

    def forward(self, x):
        return self.layer3(self.layer2(x))


class FeatureDiscriminator(nn.Module):
    """networks_d.py: tells RGB-branch features from thermal-branch features."""

    def __init__(self, in_dim, hidden=32):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.LeakyReLU(0.2),
            nn.Linear(hidden, 1), nn.Sigmoid(),
        )

    def forward(self, img):
        img_flat = img.view(img.size(0), -1)
        validity = self.model(img_flat)
        return validity


def roi_pool(feat, boxes, out_sz=2):
    """Crude PrRoIPool replacement: crop each box on the feature grid and pool."""
    pooled = []
    scale = feat.shape[-1]
    for b in range(feat.shape[0]):
        x0, y0, w, h = (boxes[b] * scale).long().clamp(0, scale - 1).tolist()
        crop = feat[b:b + 1, :, y0:y0 + max(h, 1), x0:x0 + max(w, 1)]
        pooled.append(F.adaptive_avg_pool2d(crop, out_sz))
    return torch.cat(pooled, dim=0)


class DiMPnet(nn.Module):
    def __init__(self, settings):
        super().__init__()
        d = settings.feature_dim
        self.feature_extractor = Backbone(d)
        self.classifier = nn.Conv2d(d, 1, 3, padding=1)
        self.bb_regressor = nn.Sequential(nn.Linear(d * 4 + 4, 32), nn.ReLU(), nn.Linear(32, 1))
        self.feat_D2 = FeatureDiscriminator(d * 4)

    def tracker_parameters(self):
        return [p for n, p in self.named_parameters() if not n.startswith("feat_D2")]

    def forward(self, train_imgs, test_imgs, train_imgs_t, test_imgs_t, test_bb, test_proposals):
        test_feat = self.feature_extractor(test_imgs)
        test_feat_t = self.feature_extractor(test_imgs_t)
        fused = 0.5 * (test_feat + test_feat_t)
        target_scores = self.classifier(fused)
        roi4r = roi_pool(test_feat, test_bb)
        roi4t = roi_pool(test_feat_t, test_bb)
        roi_fused = 0.5 * (roi4r + roi4t).flatten(1)
        iou_pred = self.bb_regressor(torch.cat([roi_fused, test_proposals], dim=1)).squeeze(1)
        pred_fake_feat_G2 = self.feat_D2.forward(roi4t)
        return target_scores, iou_pred, pred_fake_feat_G2, roi4r, roi4t


def gauss_label(bb, sz, sigma=0.15):
    ys = torch.linspace(0, 1, sz).view(1, sz, 1)
    xs = torch.linspace(0, 1, sz).view(1, 1, sz)
    cx = (bb[:, 0] + bb[:, 2] / 2).view(-1, 1, 1)
    cy = (bb[:, 1] + bb[:, 3] / 2).view(-1, 1, 1)
    return torch.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * sigma ** 2)).unsqueeze(1)


class DiMPActor:
    def __init__(self, net, objective, loss_weight):
        self.net = net
        self.objective = objective
        self.loss_weight = loss_weight

    def __call__(self, data):
        target_scores, iou_pred, pred_fake, roi4r, roi4t = self.net(
            train_imgs=data["train_images"], test_imgs=data["test_images"],
            train_imgs_t=data["train_images_t"], test_imgs_t=data["test_images_t"],
            test_bb=data["test_anno"], test_proposals=data["test_proposals"])
        label = gauss_label(data["test_anno"], target_scores.shape[-1])
        loss_test_clf = self.objective["test_clf"](target_scores, label)
        loss_iou = self.objective["iou"](iou_pred, data["proposal_iou"])
        valid = torch.ones_like(pred_fake)
        loss_adv = self.objective["adv"](pred_fake, valid)
        w = self.loss_weight
        loss = w["test_clf"] * loss_test_clf + w["iou"] * loss_iou + w["adv"] * loss_adv

        # discriminator: RGB features are "real", thermal features are "fake"
        pred_real = self.net.feat_D2(roi4r.detach())
        pred_fake_d = self.net.feat_D2(roi4t.detach())
        loss_D = 0.5 * (self.objective["adv"](pred_real, torch.ones_like(pred_real)) +
                        self.objective["adv"](pred_fake_d, torch.zeros_like(pred_fake_d)))
        stats = {"Loss/total": loss.item(), "Loss/iou": loss_iou.item(),
                 "Loss/test_clf": loss_test_clf.item(), "Loss/D": loss_D.item()}
        return loss, loss_D, stats


class SyntheticRGBTLoader:
    def __init__(self, settings, training=True):
        self.s = settings
        self.training = training
        self.gen = torch.Generator().manual_seed(settings.seed + (0 if training else 1))

    def __len__(self):
        return self.s.iters_per_epoch

    def __iter__(self):
        s, g = self.s, self.gen
        for _ in range(len(self)):
            b, sz = s.batch_size, s.image_sz
            anno = torch.cat([torch.rand(b, 2, generator=g) * 0.5,
                              0.2 + 0.3 * torch.rand(b, 2, generator=g)], dim=1)
            yield {
                "train_images": torch.randn(b, 3, sz, sz, generator=g),
                "test_images": torch.randn(b, 3, sz, sz, generator=g),
                "train_images_t": torch.randn(b, 3, sz, sz, generator=g),
                "test_images_t": torch.randn(b, 3, sz, sz, generator=g),
                "test_anno": anno,
                "test_proposals": anno + 0.05 * torch.randn(b, 4, generator=g),
                "proposal_iou": torch.rand(b, generator=g),
            }


class StatValue:
    def __init__(self):
        self.history = []

    def update(self, val):
        self.history.append(val)

    @property
    def avg(self):
        return sum(self.history) / max(len(self.history), 1)


class LTRTrainer:
    def __init__(self, actor, loaders, optimizer, optimizer_D, settings, lr_scheduler, lr_scheduler_D):
        self.actor = actor
        self.loaders = loaders
        self.optimizer = optimizer
        self.optimizer_D = optimizer_D
        self.settings = settings
        self.lr_scheduler = lr_scheduler
        self.lr_scheduler_D = lr_scheduler_D
        self.stats = collections.OrderedDict({l_name: None for l_name in ["train", "val"]})
        self.epoch = 0

    def cycle_dataset(self, loader, name):
        self.actor.net.train(loader.training)
        torch.set_grad_enabled(loader.training)
        self.stats[name] = collections.defaultdict(StatValue)
        for i, data in enumerate(loader, 1):
            loss, loss_D, stats = self.actor(data)
            if loader.training:
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                self.optimizer_D.zero_grad()
                loss_D.backward()
                self.optimizer_D.step()
            for k, v in stats.items():
                self.stats[name][k].update(v)
            if i % self.settings.print_interval == 0:
                self._print_stats(i, loader, name)
        torch.set_grad_enabled(True)

    def _print_stats(self, i, loader, name):
        msg = ", ".join(f"{k}: {v.avg:.4f}" for k, v in self.stats[name].items())
        print(f"[{name}: {self.epoch}, {i} / {len(loader)}] {msg}")

    def train_epoch(self):
        for loader, name in zip(self.loaders, ["train", "val"]):
            self.cycle_dataset(loader, name)

    def train(self, max_epochs):
        for epoch in range(1, max_epochs + 1):
            self.epoch = epoch
            self.train_epoch()
            self.lr_scheduler.step()
            self.lr_scheduler_D.step()


def run(settings):
    torch.manual_seed(settings.seed)
    net = DiMPnet(settings)
    objective = {"iou": nn.MSELoss(), "test_clf": nn.MSELoss(), "adv": nn.BCELoss()}
    actor = DiMPActor(net=net, objective=objective, loss_weight=settings.loss_weight)
    optimizer = torch.optim.Adam(net.tracker_parameters(), lr=settings.lr)
    optimizer_D = torch.optim.Adam(net.feat_D2.parameters(), lr=settings.lr_D, betas=(0.5, 0.999))
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=15, gamma=0.2)
    lr_scheduler_D = torch.optim.lr_scheduler.StepLR(optimizer_D, step_size=15, gamma=0.2)
    loaders = [SyntheticRGBTLoader(settings, True), SyntheticRGBTLoader(settings, False)]
    trainer = LTRTrainer(actor, loaders, optimizer, optimizer_D, settings, lr_scheduler, lr_scheduler_D)
    trainer.train(settings.num_epochs)


def main():
    run(Settings())


if __name__ == "__main__":
    main()
