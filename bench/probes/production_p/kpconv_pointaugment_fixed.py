# expect: clean
# source: https://github.com/torch-points3d/torch-points3d/issues/552
"""PointAugment-style learned augmentation for a KPConv point-cloud classifier.

The augmentor predicts a per-shape transformation matrix and per-point
displacements; the classifier (rigid KPConv blocks, torch-points3d ops) is
trained on original and augmented clouds, while the augmentor is trained to
produce samples that are harder, but not too hard, for the classifier.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ---------------------------------------------------------------- torch-points3d ops
def gather(x, idx, method=2):
    """
    https://github.com/pytorch/pytorch/issues/15245
    implementation of a custom gather operation for faster backwards.
    :param x: input with shape [N, D_1, ... D_d]
    :param idx: indexing with shape [n_1, ..., n_m]
    :return: x[idx] with shape [n_1, ..., n_m, D_1, ... D_d]
    """
    idx[idx == -1] = x.shape[0] - 1  # Shadow point
    if method == 0:
        return x[idx]
    for i, ni in enumerate(idx.size()[1:]):
        x = x.unsqueeze(i + 1)
        new_s = list(x.size())
        new_s[i + 1] = ni
        x = x.expand(new_s)
    n = len(idx.size())
    for i, di in enumerate(x.size()[n:]):
        idx = idx.unsqueeze(i + n)
        new_s = list(idx.size())
        new_s[i + n] = di
        idx = idx.expand(new_s)
    return x.gather(0, idx.clone())


def KPConv_ops(query_points, support_points, neighbors_indices, features, K_points, K_values,
               KP_extent, KP_influence="linear", aggregation_mode="sum"):
    # Add a fake point in the last row for shadow neighbors
    shadow_point = torch.ones_like(support_points[:1, :]) * 1e6
    support_points = torch.cat([support_points, shadow_point], dim=0)
    # Get neighbor points [n_points, n_neighbors, dim]
    neighbors = gather(support_points, neighbors_indices)
    neighbors = neighbors - query_points.unsqueeze(1)
    differences = neighbors.unsqueeze(2) - K_points
    sq_distances = torch.sum(differences ** 2, dim=3)
    if KP_influence == "linear":
        all_weights = torch.clamp(1 - torch.sqrt(sq_distances + 1e-12) / KP_extent, min=0.0)
    elif KP_influence == "gaussian":
        all_weights = torch.exp(-sq_distances / (2 * (KP_extent * 0.3) ** 2))
    else:
        raise ValueError("Unknown influence function type (config.KP_influence)")
    all_weights = all_weights.transpose(2, 1)
    features = torch.cat([features, torch.zeros_like(features[:1, :])], dim=0)
    # Get the features of each neighborhood [n_points, n_neighbors, in_fdim]
    neighborhood_features = gather(features, neighbors_indices)
    weighted_features = torch.matmul(all_weights, neighborhood_features)
    weighted_features = weighted_features.permute(1, 0, 2)
    kernel_outputs = torch.matmul(weighted_features, K_values)
    return torch.sum(kernel_outputs, dim=0)


def kernel_point_disposition(num_points, radius):
    """Center point plus a Fibonacci shell (stand-in for the optimized KP dispositions)."""
    k = np.arange(num_points - 1) + 0.5
    phi = np.arccos(1 - 2 * k / (num_points - 1))
    theta = math.pi * (1 + 5 ** 0.5) * k
    shell = np.stack([np.cos(theta) * np.sin(phi), np.sin(theta) * np.sin(phi), np.cos(phi)], 1)
    return np.concatenate([np.zeros((1, 3)), 0.66 * radius * shell]).astype(np.float32)


class KPConvLayer(nn.Module):
    def __init__(self, num_inputs, num_outputs, point_influence, n_kernel_points=15, KP_influence="linear"):
        super().__init__()
        self.kernel_radius = 1.5 * point_influence
        self.point_influence = point_influence
        self.KP_influence = KP_influence
        self.register_buffer("K_points", torch.from_numpy(kernel_point_disposition(n_kernel_points, self.kernel_radius)))
        self.weight = nn.Parameter(torch.empty(n_kernel_points, num_inputs, num_outputs))
        nn.init.xavier_normal_(self.weight)

    def forward(self, query_points, support_points, neighbors, x):
        return KPConv_ops(query_points, support_points, neighbors, x, self.K_points, self.weight,
                          self.point_influence, self.KP_influence)


class SimpleBlock(nn.Module):
    def __init__(self, down_conv_nn, prev_grid_size, sigma=1.0):
        super().__init__()
        num_inputs, num_outputs = down_conv_nn
        self.kp_conv = KPConvLayer(num_inputs, num_outputs, point_influence=prev_grid_size * sigma)
        self.bn = nn.BatchNorm1d(num_outputs, momentum=0.02)
        self.activation = nn.LeakyReLU(negative_slope=0.1)

    def forward(self, data):
        x = self.kp_conv(data["pos"], data["pos"], data["neighbors"], data["x"])
        return dict(data, x=self.activation(self.bn(x)))


def radius_search(pos, batch, radius, max_num_neighbors):
    d = torch.cdist(pos, pos)
    d = d.masked_fill(batch[:, None] != batch[None, :], float("inf"))
    dist, idx = d.topk(max_num_neighbors, dim=1, largest=False)
    return idx.masked_fill(dist > radius, -1)


# ---------------------------------------------------------------- models
class KPConvClassifier(nn.Module):
    def __init__(self, num_classes, grid_size=0.25, radius=0.6, max_neighbors=16):
        super().__init__()
        self.radius, self.max_neighbors = radius, max_neighbors
        self.blocks = nn.ModuleList([SimpleBlock((1, 16), grid_size), SimpleBlock((16, 32), grid_size)])
        self.head = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, num_classes))

    def forward(self, pos, batch, num_clouds):
        with torch.no_grad():
            neighbors = radius_search(pos.detach(), batch, self.radius, self.max_neighbors)
        data = {"pos": pos, "neighbors": neighbors, "x": torch.ones(pos.size(0), 1)}
        for block in self.blocks:
            data = block(data)
        pooled = torch.stack([data["x"][batch == b].max(0)[0] for b in range(num_clouds)])
        return self.head(pooled)


class Augmentor(nn.Module):
    """Shape-wise transform M (3x3) and point-wise displacement D: P' = P M + D."""

    def __init__(self, noise_dim=16, feat_dim=64):
        super().__init__()
        self.noise_dim = noise_dim
        self.point_mlp = nn.Sequential(nn.Linear(3, feat_dim), nn.ReLU(), nn.Linear(feat_dim, feat_dim))
        self.to_matrix = nn.Sequential(nn.Linear(feat_dim + noise_dim, 32), nn.ReLU(), nn.Linear(32, 9))
        self.to_disp = nn.Sequential(nn.Linear(2 * feat_dim + noise_dim, 32), nn.ReLU(), nn.Linear(32, 3))
        nn.init.zeros_(self.to_matrix[-1].weight)
        nn.init.zeros_(self.to_matrix[-1].bias)

    def forward(self, pos, batch, num_clouds):
        feat = self.point_mlp(pos)
        out = []
        for b in range(num_clouds):
            f, p = feat[batch == b], pos[batch == b]
            g = torch.cat([f.max(0)[0], torch.randn(self.noise_dim)])
            M = torch.eye(3) + 0.1 * self.to_matrix(g).view(3, 3)
            D = 0.02 * torch.tanh(self.to_disp(torch.cat([f, g.expand(f.size(0), -1)], 1)))
            out.append(p @ M + D)
        return torch.cat(out)


# ---------------------------------------------------------------- data / losses
def make_cloud(label, rng, n=96):
    u = rng.rand(n, 3) * 2 - 1
    if label == 0:   # sphere
        p = u / np.linalg.norm(u, axis=1, keepdims=True)
    elif label == 1:  # cube surface
        p = u.copy(); ax = rng.randint(0, 3, n); p[np.arange(n), ax] = np.sign(u[np.arange(n), ax])
    elif label == 2:  # cylinder
        t = rng.rand(n) * 2 * math.pi; p = np.stack([np.cos(t), np.sin(t), u[:, 2]], 1)
    else:             # cone
        t = rng.rand(n) * 2 * math.pi; h = rng.rand(n); p = np.stack([h * np.cos(t), h * np.sin(t), 1 - 2 * h], 1)
    return (p + 0.02 * rng.randn(n, 3)).astype(np.float32)


def make_batch(rng, batch_size=8, num_classes=4):
    labels = rng.randint(0, num_classes, batch_size)
    pos = torch.from_numpy(np.concatenate([make_cloud(l, rng) for l in labels]))
    batch = torch.arange(batch_size).repeat_interleave(96)
    return pos, batch, torch.from_numpy(labels).long()


def aug_loss(pred_aug, pred_true, target, rho=1.5, lam=1.0):
    l_aug, l_true = F.cross_entropy(pred_aug, target), F.cross_entropy(pred_true, target)
    return l_aug + lam * torch.abs(1.0 - torch.exp(l_aug - rho * l_true))


def cls_loss(pred_aug, pred_true, target):
    return F.cross_entropy(pred_true, target) + F.cross_entropy(pred_aug, target)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--lr_c", type=float, default=1e-3)
    parser.add_argument("--lr_a", type=float, default=1e-3)
    args = parser.parse_args([])
    rng = np.random.RandomState(0)
    classifier, augmentor = KPConvClassifier(num_classes=4), Augmentor()
    optimizer_c = torch.optim.Adam(classifier.parameters(), lr=args.lr_c, weight_decay=1e-4)
    optimizer_a = torch.optim.Adam(augmentor.parameters(), lr=args.lr_a, betas=(0.9, 0.999))
    scheduler_c = torch.optim.lr_scheduler.StepLR(optimizer_c, step_size=20, gamma=0.5)
    for epoch in range(args.epochs):
        classifier.train(); augmentor.train()
        for it in range(args.iters):
            pos, batch, target = make_batch(rng)
            pos_aug = augmentor(pos, batch, 8)
            out_true = classifier(pos, batch, 8)
            out_aug = classifier(pos_aug, batch, 8)
            augLoss = aug_loss(out_aug, out_true.detach(), target)
            clsLoss = cls_loss(out_aug, out_true, target)
            optimizer_a.zero_grad(); optimizer_c.zero_grad()
            augLoss.backward(retain_graph=True)
            clsLoss.backward(retain_graph=True)
            optimizer_a.step(); optimizer_c.step()
        scheduler_c.step()
        classifier.eval()
        with torch.no_grad():
            pos, batch, target = make_batch(np.random.RandomState(99), batch_size=16)
            acc = (classifier(pos, batch, 16).argmax(1) == target).float().mean().item()
        print(f"epoch {epoch}: aug loss {augLoss.item():.3f} cls loss {clsLoss.item():.3f} val acc {acc:.3f}")


main()
