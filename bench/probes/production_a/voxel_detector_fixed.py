# expect: clean
# source: https://github.com/dd-iuonac/object-detector-in-carla/issues/61
"""VoxelNet-style 3D detector: voxel feature encoder, BEV scatter, anchor head, focal + smooth-L1 loss."""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_CFG = {
    "voxel_feature_extractor": {"num_input_features": 4, "num_filters": [16, 32], "with_distance": False},
    "grid": {"nx": 16, "ny": 16, "max_points_per_voxel": 8, "max_voxels": 60},
    "rpn": {"num_anchor_per_loc": 2, "box_code_size": 7, "num_filters": 32},
    "loss": {"focal_alpha": 0.25, "focal_gamma": 2.0, "cls_weight": 1.0, "loc_weight": 2.0,
             "code_weights": [1.0] * 7},
    "train": {"batch_size": 2, "steps": 5, "lr": 2e-3, "weight_decay": 1e-4},
    "seed": 0,
}


def get_paddings_indicator(actual_num, max_num, axis=0):
    actual_num = torch.unsqueeze(actual_num, axis + 1)
    max_num_shape = [1] * len(actual_num.shape)
    max_num_shape[axis + 1] = -1
    max_num = torch.arange(max_num, dtype=torch.int, device=actual_num.device).view(max_num_shape)
    return actual_num.int() > max_num


class VFELayer(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.units = out_channels // 2
        self.linear = nn.Linear(in_channels, self.units, bias=False)
        self.norm = nn.BatchNorm1d(self.units, eps=1e-3, momentum=0.01)

    def forward(self, inputs):
        voxel_count = inputs.shape[1]
        x = self.linear(inputs)
        x = self.norm(x.permute(0, 2, 1).contiguous()).permute(0, 2, 1).contiguous()
        pointwise = F.relu(x)
        aggregated = torch.max(pointwise, dim=1, keepdim=True)[0]
        repeated = aggregated.repeat(1, voxel_count, 1)
        return torch.cat([pointwise, repeated], dim=2)


class VoxelFeatureExtractor(nn.Module):
    def __init__(self, num_input_features, num_filters, with_distance):
        super().__init__()
        num_input_features += 3 + int(with_distance)
        self._with_distance = with_distance
        self.vfe1 = VFELayer(num_input_features, num_filters[0])
        self.vfe2 = VFELayer(num_filters[0], num_filters[1])
        self.linear = nn.Linear(num_filters[1], num_filters[1], bias=False)
        self.norm = nn.BatchNorm1d(num_filters[1], eps=1e-3, momentum=0.01)

    def forward(self, features, num_voxels):
        points_mean = features[:, :, :3].sum(dim=1, keepdim=True) / num_voxels.type_as(features).view(-1, 1, 1)
        features_relative = features[:, :, :3] - points_mean
        if self._with_distance:
            points_dist = torch.norm(features[:, :, :3], 2, 2, keepdim=True)
            features = torch.cat([features, features_relative, points_dist], dim=-1)
        else:
            features = torch.cat([features, features_relative], dim=-1)
        voxel_count = features.shape[1]
        mask = get_paddings_indicator(num_voxels, voxel_count, axis=0)
        mask = torch.unsqueeze(mask, -1).type_as(features)
        x = self.vfe1(features)
        x = x * mask
        x = self.vfe2(x)
        x = x * mask
        x = self.linear(x)
        x = self.norm(x.permute(0, 2, 1).contiguous()).permute(0, 2, 1).contiguous()
        x = F.relu(x)
        x = x * mask
        return torch.max(x, dim=1)[0]


class BEVScatter(nn.Module):
    def __init__(self, nx, ny):
        super().__init__()
        self.nx, self.ny = nx, ny

    def forward(self, voxel_features, coors, batch_size):
        c = voxel_features.shape[1]
        flat = coors[:, 0] * self.ny * self.nx + coors[:, 1] * self.nx + coors[:, 2]
        canvas = voxel_features.new_zeros(c, batch_size * self.ny * self.nx)
        canvas = canvas.index_copy(1, flat, voxel_features.t())
        return canvas.view(c, batch_size, self.ny, self.nx).permute(1, 0, 2, 3).contiguous()


class RPNHead(nn.Module):
    def __init__(self, in_channels, num_filters, num_anchor_per_loc, box_code_size):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(in_channels, num_filters, 3, padding=1, bias=False),
            nn.BatchNorm2d(num_filters), nn.ReLU(),
            nn.Conv2d(num_filters, num_filters, 3, padding=1, bias=False),
            nn.BatchNorm2d(num_filters), nn.ReLU(),
        )
        self.conv_cls = nn.Conv2d(num_filters, num_anchor_per_loc, 1)
        self.conv_box = nn.Conv2d(num_filters, num_anchor_per_loc * box_code_size, 1)
        self.box_code_size = box_code_size

    def forward(self, x):
        x = self.block(x)
        b = x.shape[0]
        cls_preds = self.conv_cls(x).permute(0, 2, 3, 1).reshape(b, -1)
        box_preds = self.conv_box(x).permute(0, 2, 3, 1).reshape(b, -1, self.box_code_size)
        return cls_preds, box_preds


class VoxelNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        vfe, grid, rpn = cfg["voxel_feature_extractor"], cfg["grid"], cfg["rpn"]
        self.voxel_feature_extractor = VoxelFeatureExtractor(**vfe)
        self.scatter = BEVScatter(grid["nx"], grid["ny"])
        self.rpn = RPNHead(vfe["num_filters"][-1], rpn["num_filters"], rpn["num_anchor_per_loc"],
                           rpn["box_code_size"])

    def forward(self, example):
        voxel_features = self.voxel_feature_extractor(example["voxels"], example["num_points"])
        spatial = self.scatter(voxel_features, example["coordinates"], example["batch_size"])
        return self.rpn(spatial)


def sigmoid_focal_loss(logits, targets, weights, alpha, gamma):
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * (1 - p_t) ** gamma * ce * weights).sum()


def detection_loss(cls_preds, box_preds, labels, reg_targets, cfg):
    lc = cfg["loss"]
    positives = (labels > 0).float()
    cls_weights = torch.ones_like(positives)
    num_pos = positives.sum().clamp(min=1.0)
    cls_loss = sigmoid_focal_loss(cls_preds, positives, cls_weights, lc["focal_alpha"], lc["focal_gamma"]) / num_pos
    code_w = box_preds.new_tensor(lc["code_weights"])
    diff = F.smooth_l1_loss(box_preds, reg_targets, reduction="none", beta=1.0 / 9.0) * code_w
    loc_loss = (diff.sum(-1) * positives).sum() / num_pos
    return lc["cls_weight"] * cls_loss + lc["loc_weight"] * loc_loss, cls_loss, loc_loss


def synthetic_example(cfg, rng):
    g, b = cfg["grid"], cfg["train"]["batch_size"]
    voxels, num_points, coords = [], [], []
    for bi in range(b):
        cells = rng.choice(g["nx"] * g["ny"], g["max_voxels"] // b, replace=False)
        for cell in cells:
            n = rng.randint(1, g["max_points_per_voxel"] + 1)
            pts = np.zeros((g["max_points_per_voxel"], 4), dtype=np.float32)
            pts[:n] = rng.randn(n, 4).astype(np.float32)
            voxels.append(pts)
            num_points.append(n)
            coords.append((bi, cell // g["nx"], cell % g["nx"]))
    n_anchor = g["nx"] * g["ny"] * cfg["rpn"]["num_anchor_per_loc"]
    labels = (rng.rand(b, n_anchor) < 0.05).astype(np.int64)
    reg_targets = rng.randn(b, n_anchor, cfg["rpn"]["box_code_size"]).astype(np.float32) * 0.1
    return {
        "voxels": torch.from_numpy(np.stack(voxels)),
        "num_points": torch.tensor(num_points),
        "coordinates": torch.tensor(coords, dtype=torch.long),
        "batch_size": b,
        "labels": torch.from_numpy(labels),
        "reg_targets": torch.from_numpy(reg_targets),
    }


def train(cfg):
    torch.manual_seed(cfg["seed"])
    rng = np.random.RandomState(cfg["seed"])
    net = VoxelNet(cfg)
    tc = cfg["train"]
    optimizer = torch.optim.AdamW(net.parameters(), lr=tc["lr"], weight_decay=tc["weight_decay"])
    net.train()
    t0 = time.time()
    for step in range(tc["steps"]):
        example = synthetic_example(cfg, rng)
        cls_preds, box_preds = net(example)
        loss, cls_loss, loc_loss = detection_loss(cls_preds, box_preds, example["labels"],
                                                  example["reg_targets"], cfg)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        optimizer.step()
        print("step %d  loss %.4f  cls %.4f  loc %.4f" % (step, loss.item(), cls_loss.item(), loc_loss.item()))
    print("train time %.2fs" % (time.time() - t0))


if __name__ == "__main__":
    train(MODEL_CFG)
