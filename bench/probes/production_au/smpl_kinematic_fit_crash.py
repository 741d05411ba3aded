# expect: inplace_version
# source: https://github.com/nkolot/GraphCMR/issues/19
"""SMPL parameter regression from image features, supervised by 3D joints and vertices.

A small regressor predicts the 72 axis-angle pose parameters and 10 shape coefficients
of an SMPL-style body model from (pre-extracted) image features.  The body model blends
shape and pose correctives, runs forward kinematics along the kinematic tree and applies
linear blend skinning; the loss compares the posed mesh and its regressed joints with the
ground truth.  The SMPL assets (template, blend shapes, skinning weights, joint regressor)
are replaced by small random buffers of the same structure.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)

KINTREE_PARENTS = [-1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 12, 13, 14, 16, 17, 18, 19, 20, 21]


def rodrigues(theta):
    """Convert axis-angle (N, 3) to rotation matrices (N, 3, 3)."""
    l1norm = torch.norm(theta + 1e-8, p=2, dim=1)
    angle = torch.unsqueeze(l1norm, -1)
    normalized = torch.div(theta, angle)
    angle = angle * 0.5
    v_cos = torch.cos(angle)
    v_sin = torch.sin(angle)
    quat = torch.cat([v_cos, v_sin * normalized], dim=1)
    return quat2mat(quat)


def quat2mat(quat):
    norm_quat = quat / quat.norm(p=2, dim=1, keepdim=True)
    w, x, y, z = norm_quat[:, 0], norm_quat[:, 1], norm_quat[:, 2], norm_quat[:, 3]
    B = quat.size(0)
    w2, x2, y2, z2 = w.pow(2), x.pow(2), y.pow(2), z.pow(2)
    wx, wy, wz = w * x, w * y, w * z
    xy, xz, yz = x * y, x * z, y * z
    rotMat = torch.stack([w2 + x2 - y2 - z2, 2 * xy - 2 * wz, 2 * wy + 2 * xz,
                          2 * wz + 2 * xy, w2 - x2 + y2 - z2, 2 * yz - 2 * wx,
                          2 * xz - 2 * wy, 2 * wx + 2 * yz, w2 - x2 - y2 + z2], dim=1).view(B, 3, 3)
    return rotMat


class SMPL(nn.Module):
    def __init__(self, num_verts=300):
        super().__init__()
        self.num_verts = num_verts
        J_regressor = torch.rand(24, num_verts)
        self.register_buffer("J_regressor", J_regressor / J_regressor.sum(1, keepdim=True))
        weights = torch.rand(num_verts, 24) ** 4
        self.register_buffer("weights", weights / weights.sum(1, keepdim=True))
        self.register_buffer("posedirs", 0.01 * torch.randn(num_verts, 3, 207))
        self.register_buffer("v_template", torch.randn(num_verts, 3) * 0.3)
        self.register_buffer("shapedirs", 0.03 * torch.randn(num_verts, 3, 10))
        self.register_buffer("parent", torch.LongTensor(KINTREE_PARENTS[1:]))
        self.pose_shape = [24, 3]
        self.beta_shape = [10]

    def forward(self, pose, beta):
        device = pose.device
        batch_size = pose.shape[0]
        v_template = self.v_template[None, :]
        shapedirs = self.shapedirs.view(-1, 10)[None, :].expand(batch_size, -1, -1)
        beta = beta[:, :, None]
        v_shaped = torch.matmul(shapedirs, beta).view(-1, self.num_verts, 3) + v_template
        J = torch.matmul(self.J_regressor[None], v_shaped)
        if pose.ndimension() == 4:
            R = pose
        elif pose.ndimension() == 2:
            pose_cube = pose.view(-1, 3)
            R = rodrigues(pose_cube).view(batch_size, 24, 3, 3)
        I_cube = torch.eye(3)[None, None, :].to(device)
        lrotmin = (R[:, 1:, :] - I_cube).view(batch_size, -1)
        posedirs = self.posedirs.view(-1, 207)[None, :].expand(batch_size, -1, -1)
        v_posed = v_shaped + torch.matmul(posedirs, lrotmin[:, :, None]).view(-1, self.num_verts, 3)
        J_ = J.clone()
        J_[:, 1:, :] = J[:, 1:, :] - J[:, self.parent, :]
        G_ = torch.cat([R, J_[:, :, :, None]], dim=-1)
        pad_row = torch.FloatTensor([0, 0, 0, 1]).to(device).view(1, 1, 1, 4).expand(batch_size, 24, -1, -1)
        G_ = torch.cat([G_, pad_row], dim=2)
        G = G_.clone()
        for i in range(1, 24):
            G[:, i, :, :] = torch.matmul(G[:, self.parent[i - 1], :, :], G_[:, i, :, :])
        rest = torch.cat([J, torch.zeros(batch_size, 24, 1).to(device)], dim=2).view(batch_size, 24, 4, 1)
        zeros = torch.zeros(batch_size, 24, 4, 3).to(device)
        rest = torch.cat([zeros, rest], dim=-1)
        rest = torch.matmul(G, rest)
        G = G - rest
        T = torch.matmul(self.weights, G.permute(1, 0, 2, 3).contiguous().view(24, -1))
        T = T.view(self.num_verts, batch_size, 4, 4).transpose(0, 1)
        rest_shape_h = torch.cat([v_posed, torch.ones_like(v_posed)[:, :, [0]]], dim=-1)
        v = torch.matmul(T, rest_shape_h[:, :, :, None])[:, :, :3, 0]
        return v

    def get_joints(self, vertices):
        return torch.einsum("bik,ji->bjk", [vertices, self.J_regressor])


class SMPLParamRegressor(nn.Module):
    def __init__(self, in_dim=64, hidden=128):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(inplace=True),
                                    nn.Linear(hidden, hidden), nn.ReLU(inplace=True),
                                    nn.Linear(hidden, 24 * 3 + 10))
        nn.init.zeros_(self.layers[-1].weight)
        nn.init.zeros_(self.layers[-1].bias)

    def forward(self, feats):
        out = self.layers(feats)
        pose = 0.1 * out[:, :72] + 1e-3
        betas = out[:, 72:]
        return pose, betas


class FeatureMeshDataset:
    def __init__(self, smpl, n, feat_dim):
        g = torch.Generator().manual_seed(1)
        self.pose = 0.3 * torch.randn(n, 72, generator=g)
        self.beta = torch.randn(n, 10, generator=g)
        proj = torch.randn(82, feat_dim, generator=g) / 9.0
        self.feats = torch.cat([self.pose, self.beta], dim=1) @ proj
        with torch.no_grad():
            self.verts = smpl(self.pose, self.beta)
            self.joints = smpl.get_joints(self.verts)

    def batches(self, batch_size):
        for i in range(0, self.feats.size(0), batch_size):
            sl = slice(i, i + batch_size)
            yield self.feats[sl], self.verts[sl], self.joints[sl], self.beta[sl]


class Trainer:
    def __init__(self, options):
        self.options = options
        self.smpl = SMPL(options.num_verts)
        self.regressor = SMPLParamRegressor(options.feat_dim)
        self.optimizer = torch.optim.Adam(self.regressor.parameters(), lr=options.lr,
                                          weight_decay=options.wd)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=0.9)
        self.train_ds = FeatureMeshDataset(self.smpl, options.num_train, options.feat_dim)
        self.val_ds = FeatureMeshDataset(self.smpl, options.num_val, options.feat_dim)
        self.step_count = 0

    def shape_loss(self, pred_vertices, gt_vertices):
        return F.l1_loss(pred_vertices, gt_vertices)

    def keypoint_3d_loss(self, pred_joints, gt_joints):
        pred_joints = pred_joints - pred_joints[:, :1]
        gt_joints = gt_joints - gt_joints[:, :1]
        return F.mse_loss(pred_joints, gt_joints)

    def train_step(self, feats, gt_vertices, gt_joints, gt_betas):
        self.regressor.train()
        pred_pose, pred_betas = self.regressor(feats)
        pred_vertices = self.smpl(pred_pose, pred_betas)
        pred_joints = self.smpl.get_joints(pred_vertices)
        loss = (self.options.shape_loss_weight * self.shape_loss(pred_vertices, gt_vertices)
                + self.options.keypoint_loss_weight * self.keypoint_3d_loss(pred_joints, gt_joints)
                + self.options.beta_loss_weight * F.mse_loss(pred_betas, gt_betas))
        self.optimizer.zero_grad()
        loss.backward()  # raises
        self.optimizer.step()
        self.step_count += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.regressor.eval()
        errors = []
        for feats, gt_vertices, gt_joints, _ in self.val_ds.batches(self.options.batch_size):
            pred_pose, pred_betas = self.regressor(feats)
            pred_joints = self.smpl.get_joints(self.smpl(pred_pose, pred_betas))
            errors.append((pred_joints - gt_joints).norm(dim=-1).mean().item())
        return float(np.mean(errors))

    def train(self):
        for epoch in range(self.options.num_epochs):
            losses = [self.train_step(*b) for b in self.train_ds.batches(self.options.batch_size)]
            self.scheduler.step()
            print(f"epoch {epoch} loss {np.mean(losses):.4f} val MPJPE {self.evaluate():.4f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_verts", type=int, default=300)
    parser.add_argument("--feat_dim", type=int, default=64)
    parser.add_argument("--num_train", type=int, default=32)
    parser.add_argument("--num_val", type=int, default=16)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--num_epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--wd", type=float, default=0.0)
    parser.add_argument("--shape_loss_weight", type=float, default=1.0)
    parser.add_argument("--keypoint_loss_weight", type=float, default=1.0)
    parser.add_argument("--beta_loss_weight", type=float, default=0.001)
    options = parser.parse_args([])
    Trainer(options).train()


if __name__ == "__main__":
    main()
