# expect: clean
# source: https://github.com/kywind/self-corr-pose/issues/5
"""Self-supervised category-level 6D pose and shape estimation (self-corr-pose layout).

An image encoder predicts a rotation (quaternion), translation, scale and a
shape code; a conditional NeRF-style MLP (run in chunks by run_network)
predicts per-vertex deformations of a learnable category mean shape.  The
trainer combines a keypoint reprojection loss, a chamfer loss to observed
points and deformation / symmetry regularisers.  absl-style flags are replaced
by a dataclass; synthetic objects, CPU only.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Opts:
    codedim: int = 16
    n_verts: int = 64
    img_size: int = 32
    batch_size: int = 4
    no_deform: bool = False
    deform_ratio: float = 1.0
    lr: float = 1e-3
    shape_lr: float = 1e-4
    num_epochs: int = 2
    iters_per_epoch: int = 3
    w_kp: float = 1.0
    w_chamfer: float = 1.0
    w_deform: float = 0.1


def get_minibatches(inputs, chunksize=1024 * 8):
    return [inputs[i:i + chunksize] for i in range(0, inputs.shape[0], chunksize)]


def run_network(network_fn, pts, viewdirs, chunksize, embed_fn, embeddirs_fn, code=None):
    pts_flat = pts.reshape((-1, pts.shape[-1]))
    embedded = embed_fn(pts_flat) if embed_fn is not None else pts_flat
    if code is not None:
        embedded = torch.cat([embedded, code[:, None].repeat(1, pts.shape[1], 1).view(-1, code.shape[-1])], 1)
    batches = get_minibatches(embedded, chunksize=chunksize)
    preds = [network_fn(batch) for batch in batches]
    radiance_field = preds[0] if len(preds) == 1 else torch.cat(preds, dim=0)
    return radiance_field.reshape(list(pts.shape[:-1]) + [radiance_field.shape[-1]])


class CondNeRFModel(nn.Module):
    def __init__(self, num_layers=2, hidden_size=64, codesize=16, out_channel=3):
        super().__init__()
        self.codesize = codesize
        self.layer1 = nn.Linear(3 + codesize, hidden_size)
        self.layers_xyz = nn.ModuleList([nn.Linear(hidden_size, hidden_size) for _ in range(num_layers - 1)])
        self.fc_feat = nn.Linear(hidden_size, hidden_size)
        self.fc_alpha = nn.Linear(hidden_size, 1)
        self.layers_dir = nn.ModuleList([nn.Linear(hidden_size, hidden_size // 2)])
        self.fc_rgb = nn.Linear(hidden_size // 2, out_channel)

    def forward(self, x):
        code, xyz = x[:, -self.codesize:], x[:, :-self.codesize]
        x = self.layer1(torch.cat([xyz, code], 1))
        for layer in self.layers_xyz:
            x = F.relu(layer(x))
        feat = F.relu(self.fc_feat(x))
        alpha = self.fc_alpha(x)
        for layer in self.layers_dir:
            feat = F.relu(layer(feat))
        rgb = self.fc_rgb(feat)
        # bounded offsets, the last channel is unused for deformation
        return torch.tanh(torch.cat((rgb, alpha), dim=-1))


class ShapePredictor(nn.Module):
    def __init__(self, opts):
        super().__init__()
        self.shapenerf = CondNeRFModel(codesize=opts.codedim)
        self.no_deform = opts.no_deform
        self.deform_ratio = opts.deform_ratio

    def forward(self, mean_v, shape_code):
        if self.no_deform:
            return mean_v
        shape_delta = run_network(self.shapenerf, mean_v.detach(), None, 131072, None, None,
                                  code=shape_code)[:, :, :-1]
        shape_delta = shape_delta - shape_delta.mean(1, keepdims=True)
        pred_v = mean_v + shape_delta * self.deform_ratio
        return pred_v


class PosePredictor(nn.Module):
    def __init__(self, in_dim):
        super().__init__()
        self.quat = nn.Linear(in_dim, 4)
        self.trans = nn.Linear(in_dim, 3)
        self.scale = nn.Linear(in_dim, 1)

    def forward(self, feat):
        quat = F.normalize(self.quat(feat) + torch.tensor([1.0, 0, 0, 0]), dim=-1)
        trans = self.trans(feat) * 0.1 + torch.tensor([0.0, 0.0, 2.5])
        scale = 1.0 + 0.1 * torch.tanh(self.scale(feat))
        return quat, trans, scale


def quat_to_rotmat(q):
    w, x, y, z = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1).view(*q.shape[:-1], 3, 3)


class Encoder(nn.Module):
    def __init__(self, img_size, out_dim=64):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, out_dim), nn.ReLU())

    def forward(self, img):
        return self.net(img)


class CorrPoseModel(nn.Module):
    def __init__(self, opts):
        super().__init__()
        self.opts = opts
        self.encoder = Encoder(opts.img_size)
        self.pose_predictor = PosePredictor(64)
        self.code_predictor = nn.Linear(64, opts.codedim)
        self.shape_predictor = ShapePredictor(opts)
        g = torch.Generator().manual_seed(3)
        self.mean_v = nn.Parameter(F.normalize(torch.randn(opts.n_verts, 3, generator=g), dim=-1) * 0.5)
        self.kp_index = torch.arange(0, opts.n_verts, 8)

    def forward(self, img):
        feat = self.encoder(img)
        quat, trans, scale = self.pose_predictor(feat)
        shape_code = self.code_predictor(feat)
        mean_v = self.mean_v[None].expand(img.shape[0], -1, -1)
        pred_v = self.shape_predictor(mean_v, shape_code)
        rot = quat_to_rotmat(quat)
        cam_v = scale[:, None] * pred_v @ rot.transpose(1, 2) + trans[:, None]
        proj = cam_v[..., :2] / cam_v[..., 2:].clamp(min=1e-3)
        return dict(pred_v=pred_v, cam_v=cam_v, proj=proj, quat=quat, trans=trans, mean_v=mean_v)


def chamfer(a, b):
    d = torch.cdist(a, b)
    return d.min(2)[0].mean(1) + d.min(1)[0].mean(1)


class Trainer:
    def __init__(self, opts):
        self.opts = opts
        self.model = CorrPoseModel(opts)
        net_params = [p for n, p in self.model.named_parameters() if n != "mean_v"]
        self.optimizer = torch.optim.Adam(net_params, lr=opts.lr)
        self.shape_optimizer = torch.optim.Adam([self.model.mean_v], lr=opts.shape_lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=opts.num_epochs)
        g = torch.Generator().manual_seed(0)
        self.data = [self.make_batch(g) for _ in range(opts.iters_per_epoch)]

    def make_batch(self, g):
        o = self.opts
        img = torch.randn(o.batch_size, 3, o.img_size, o.img_size, generator=g)
        pts = torch.randn(o.batch_size, 48, 3, generator=g) * 0.3 + torch.tensor([0.0, 0.0, 2.5])
        kp2d = torch.randn(o.batch_size, len(range(0, o.n_verts, 8)), 2, generator=g) * 0.1
        return dict(img=img, pts=pts, kp2d=kp2d)

    def compute_losses(self, out, batch):
        kp_loss = (out["proj"][:, self.model.kp_index] - batch["kp2d"]).pow(2).sum(-1).mean(1)
        ch_loss = chamfer(out["cam_v"], batch["pts"])
        deform_loss = (out["pred_v"] - out["mean_v"]).pow(2).sum(-1).mean(1)
        o = self.opts
        return o.w_kp * kp_loss + o.w_chamfer * ch_loss + o.w_deform * deform_loss

    def train_step(self, batch):
        self.optimizer.zero_grad()
        self.shape_optimizer.zero_grad()
        out = self.model(batch["img"])
        total_loss = self.compute_losses(out, batch)
        total_loss.mean().backward()
        self.optimizer.step()
        self.shape_optimizer.step()
        return total_loss.mean().item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        errs = [self.compute_losses(self.model(b["img"]), b).mean().item() for b in self.data]
        self.model.train()
        return sum(errs) / len(errs)

    def train(self):
        for epoch in range(self.opts.num_epochs):
            for it, batch in enumerate(self.data):
                loss = self.train_step(batch)
                print("epoch %d iter %d loss %.4f" % (epoch, it, loss))
            self.scheduler.step()
            print("epoch %d eval %.4f" % (epoch, self.evaluate()))


def main():
    torch.manual_seed(0)
    Trainer(Opts()).train()


if __name__ == "__main__":
    main()
