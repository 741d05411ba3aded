# expect: clean
# source: https://github.com/paninski-lab/lightning-pose/issues/56
"""Semi-supervised heatmap pose estimation with unsupervised PCA / temporal losses.

Mirrors the lightning-pose layout: a LossFactory orchestrates per-loss
classes (supervised heatmap MSE, multiview PCA reprojection loss, temporal
loss), each loss inherits the Loss base class (remove_nans -> compute_loss ->
rectify_epsilon -> reduce_loss -> log_loss), and a small Trainer runs the
labeled + unlabeled batches.  Synthetic keypoints stand in for real video.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = SimpleNamespace(
    seed=0,
    num_keypoints=7,
    num_views=2,
    heatmap_size=16,
    image_size=32,
    batch_size=8,
    unlabeled_batch=8,
    n_epochs=2,
    lr=1e-3,
    losses_to_use=["pca_multiview", "temporal"],
    pca_multiview=SimpleNamespace(log_weight=0.0, components_to_keep=3, empirical_epsilon_percentile=0.9),
    temporal=SimpleNamespace(log_weight=1.0, epsilon=[0.5]),
)


class Loss(nn.Module):
    """Parent class for all losses."""

    def __init__(self, epsilon=0.0, log_weight=0.0):
        super().__init__()
        self.epsilon = torch.tensor(epsilon, dtype=torch.float)
        self.log_weight = torch.tensor(log_weight, dtype=torch.float)
        self.loss_name = "base"
        self.reduce_methods_dict = {"mean": torch.mean, "sum": torch.sum}

    @property
    def weight(self):
        # weight = \sigma where our trainable parameter is \log(\sigma^2).
        return 1.0 / (2.0 * torch.exp(self.log_weight))

    def rectify_epsilon(self, loss):
        # loss values below epsilon as masked to zero
        loss = F.relu(loss - self.epsilon)
        return loss

    def reduce_loss(self, loss, method="mean"):
        return self.reduce_methods_dict[method](loss)

    def log_loss(self, loss, stage):
        return [{"name": "%s_%s_loss" % (stage, self.loss_name), "value": loss.item()},
                {"name": "%s_weight" % self.loss_name, "value": float(self.weight)}]


class HeatmapMSELoss(Loss):
    def __init__(self, log_weight=0.0):
        super().__init__(log_weight=log_weight)
        self.loss_name = "heatmap_mse"

    def forward(self, heatmaps_targ, heatmaps_pred, stage="train"):
        elementwise = F.mse_loss(heatmaps_pred, heatmaps_targ, reduction="none")
        scalar = self.reduce_loss(elementwise, "mean")
        return self.weight * scalar, self.log_loss(scalar, stage)


class KeypointPCA(object):
    """Fits a multiview PCA on labeled keypoints and measures reprojection error."""

    def __init__(self, train_keypoints, num_views, components_to_keep, percentile):
        self.num_views = num_views
        data = self._format_data(train_keypoints)
        self.mean = data.mean(0, keepdim=True)
        _, _, v = torch.linalg.svd(data - self.mean, full_matrices=False)
        self.kept = v[:components_to_keep].t()
        errors = self.compute_error(data)
        self.parameters = {"epsilon": torch.quantile(errors.flatten(), percentile)}

    def _format_data(self, data_arr):
        # (batch, 2 * K * V) -> (batch * K, 2 * V): one row per keypoint, views side by side
        b = data_arr.shape[0]
        arr = data_arr.reshape(b, self.num_views, -1, 2).permute(0, 2, 1, 3)
        return arr.reshape(-1, self.num_views * 2)

    def compute_error(self, data_arr):
        centered = data_arr - self.mean
        recon = centered @ self.kept @ self.kept.t() + self.mean
        diff = (recon - data_arr).reshape(data_arr.shape[0], self.num_views, 2)
        return torch.linalg.norm(diff, ord=2, dim=2)


class PCALoss(Loss):
    """Penalize predictions that fall outside a low-dimensional subspace."""

    def __init__(self, loss_name, train_keypoints, num_views, components_to_keep=3,
                 empirical_epsilon_percentile=0.9, log_weight=0.0):
        super().__init__(log_weight=log_weight)
        self.loss_name = loss_name
        self.pca = KeypointPCA(train_keypoints, num_views, components_to_keep,
                               empirical_epsilon_percentile)
        self.epsilon = self.pca.parameters["epsilon"]

    def compute_loss(self, predictions):
        return self.pca.compute_error(data_arr=predictions)

    def forward(self, keypoints_pred, stage="train"):
        keypoints_pred = self.pca._format_data(data_arr=keypoints_pred)
        elementwise_loss = self.compute_loss(predictions=keypoints_pred)
        epsilon_insensitive_loss = self.rectify_epsilon(loss=elementwise_loss)
        scalar_loss = self.reduce_loss(epsilon_insensitive_loss, method="mean")
        return self.weight * scalar_loss, self.log_loss(scalar_loss, stage)


class TemporalLoss(Loss):
    """Penalize temporal differences for each target."""

    def __init__(self, epsilon=0.0, log_weight=0.0):
        super().__init__(epsilon=epsilon, log_weight=log_weight)
        self.loss_name = "temporal"

    def rectify_epsilon(self, loss):
        epsilon = self.epsilon.unsqueeze(0).repeat(loss.shape[0], 1)
        return loss.masked_fill(mask=loss < epsilon, value=0.0)

    def compute_loss(self, predictions):
        diffs = torch.diff(predictions, dim=0)
        reshape = torch.reshape(diffs, (diffs.shape[0], -1, 2))
        return torch.linalg.norm(reshape, ord=2, dim=2)

    def forward(self, keypoints_pred, stage="train"):
        elementwise_loss = self.compute_loss(predictions=keypoints_pred)
        epsilon_insensitive_loss = self.rectify_epsilon(loss=elementwise_loss)
        scalar_loss = self.reduce_loss(epsilon_insensitive_loss, method="mean")
        return self.weight * scalar_loss, self.log_loss(scalar_loss, stage)


class LossFactory(nn.Module):
    def __init__(self, losses):
        super().__init__()
        self.losses = nn.ModuleDict(losses)

    def forward(self, stage="train", **kwargs):
        total, logs = 0.0, []
        for name, loss_fn in self.losses.items():
            value, log = loss_fn(kwargs["keypoints_pred"], stage=stage)
            total = total + value
            logs.extend(log)
        return total, logs


class HeatmapTracker(nn.Module):
    """Tiny conv backbone + heatmap head with a soft-argmax to keypoint coordinates."""

    def __init__(self, num_keypoints, num_views, heatmap_size):
        super().__init__()
        self.num_targets = num_keypoints * num_views
        self.backbone = nn.Sequential(
            nn.Conv2d(3 * num_views, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.head = nn.Conv2d(32, self.num_targets, 1)
        ys, xs = torch.meshgrid(torch.arange(heatmap_size), torch.arange(heatmap_size), indexing="ij")
        self.register_buffer("grid", torch.stack([xs, ys], -1).float().view(-1, 2))

    def forward(self, images):
        heatmaps = self.head(self.backbone(images))
        b, k, h, w = heatmaps.shape
        probs = F.softmax(heatmaps.view(b, k, -1), dim=-1)
        coords = probs @ self.grid
        return probs.view(b, k, h, w), coords.reshape(b, -1)


class Trainer(object):
    def __init__(self, cfg):
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        n = 64
        k2 = cfg.num_keypoints * cfg.num_views * 2
        self.train_keypoints = torch.rand(n, k2, generator=g) * cfg.heatmap_size
        self.images = torch.rand(n, 3 * cfg.num_views, cfg.image_size, cfg.image_size, generator=g)
        self.unlabeled = torch.rand(32, 3 * cfg.num_views, cfg.image_size, cfg.image_size, generator=g)
        self.model = HeatmapTracker(cfg.num_keypoints, cfg.num_views, cfg.heatmap_size)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[1], gamma=0.5)
        self.supervised = HeatmapMSELoss()
        losses = {}
        if "pca_multiview" in cfg.losses_to_use:
            c = cfg.pca_multiview
            losses["pca_multiview"] = PCALoss("pca_multiview", self.train_keypoints, cfg.num_views,
                                              c.components_to_keep, c.empirical_epsilon_percentile,
                                              c.log_weight)
        if "temporal" in cfg.losses_to_use:
            losses["temporal"] = TemporalLoss(epsilon=cfg.temporal.epsilon, log_weight=cfg.temporal.log_weight)
        self.unsupervised = LossFactory(losses)

    def make_targets(self, keypoints):
        b = keypoints.shape[0]
        coords = keypoints.view(b, -1, 2)
        grid = self.model.grid.view(1, 1, -1, 2)
        d2 = ((grid - coords.unsqueeze(2)) ** 2).sum(-1)
        hm = torch.exp(-d2 / 2.0)
        hm = hm / hm.sum(-1, keepdim=True)
        s = self.cfg.heatmap_size
        return hm.view(b, -1, s, s)

    def train_step(self, idx, unl_idx):
        self.model.train()
        images, keypoints = self.images[idx], self.train_keypoints[idx]
        heatmaps_pred, _ = self.model(images)
        sup_loss, logs = self.supervised(self.make_targets(keypoints), heatmaps_pred)
        _, kp_unlabeled = self.model(self.unlabeled[unl_idx])
        unsup_loss, unsup_logs = self.unsupervised(keypoints_pred=kp_unlabeled)
        loss = sup_loss + unsup_loss
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item(), logs + unsup_logs

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        _, kp = self.model(self.images[:16])
        return (kp - self.train_keypoints[:16]).abs().mean().item()

    def fit(self):
        bs = self.cfg.batch_size
        for epoch in range(self.cfg.n_epochs):
            perm = torch.randperm(self.images.shape[0])
            for b in range(0, len(perm), bs):
                unl = torch.arange(b % 32, b % 32 + self.cfg.unlabeled_batch) % 32
                loss, _ = self.train_step(perm[b:b + bs], unl)
            self.scheduler.step()
            print("epoch %d loss %.4f val_pixel_error %.3f" % (epoch, loss, self.evaluate()))


def main():
    torch.manual_seed(CFG.seed)
    np.random.seed(CFG.seed)
    Trainer(CFG).fit()


if __name__ == "__main__":
    main()
