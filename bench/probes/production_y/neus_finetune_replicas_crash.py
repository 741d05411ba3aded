# expect: nonscalar_backward
# source: https://github.com/xxlong0/SparseNeuS/issues/42
"""Per-scene fine-tuning of a NeuS-style neural surface (SDF + colour field)
with volume rendering, organised like SparseNeuS's exp_runner_finetune: a
GenericTrainer module computes all losses for a batch of rays and the runner owns
the optimizer, the LR schedule and validation. The trainer is wrapped in a
data-parallel replica wrapper that splits the ray batch across devices and
gathers the per-replica outputs. The scene is an analytic sphere.
"""
import math
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


CONF = SimpleNamespace(
    train=SimpleNamespace(N_rays=64, end_iter=6, learning_rate=5e-3, report_freq=2, val_freq=3),
    model=SimpleNamespace(n_samples=24, sdf_hidden=64, color_hidden=64, init_variance=0.3,
                          sparse_scale_factor=50.0, sparse_weight=0.02, eikonal_weight=0.1),
    dataset=SimpleNamespace(near=0.5, far=2.5),
    general=SimpleNamespace(num_devices=2, seed=0, use_white_bkgd=False),
)


class SDFNetwork(nn.Module):
    def __init__(self, hidden, radius=0.6):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(3, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden + 1)
        nn.init.normal_(self.l3.weight[:1], mean=math.sqrt(math.pi) / math.sqrt(hidden), std=1e-4)
        nn.init.constant_(self.l3.bias[:1], -radius)

    def forward(self, pts):
        h = F.softplus(self.l1(pts), beta=100)
        h = F.softplus(self.l2(h), beta=100)
        out = self.l3(h)
        return out[..., :1], out[..., 1:]

    def gradient(self, pts):
        pts = pts.requires_grad_(True)
        sdf, _ = self.forward(pts)
        return torch.autograd.grad(sdf, pts, torch.ones_like(sdf), create_graph=True)[0]


class VarianceNetwork(nn.Module):
    def __init__(self, init_val):
        super().__init__()
        self.variance = nn.Parameter(torch.tensor(init_val))

    def forward(self, n):
        return torch.ones(n, 1) * torch.exp(self.variance * 10.0)


class RenderingNetwork(nn.Module):
    def __init__(self, feat_dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(9 + feat_dim, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, pts, normals, dirs, feats):
        return torch.sigmoid(self.net(torch.cat([pts, normals, dirs, feats], -1)))


class NeuSRenderer:
    def __init__(self, sdf_net, var_net, color_net, n_samples):
        self.sdf_net, self.var_net, self.color_net, self.n_samples = sdf_net, var_net, color_net, n_samples

    def render(self, rays_o, rays_d, near, far):
        n_rays, S = rays_o.shape[0], self.n_samples
        z = torch.linspace(near, far, S)[None].expand(n_rays, S)
        dists = torch.cat([z[:, 1:] - z[:, :-1], torch.full((n_rays, 1), (far - near) / S)], -1)
        mid = z + dists * 0.5
        pts = (rays_o[:, None] + rays_d[:, None] * mid[..., None]).reshape(-1, 3)
        dirs = rays_d[:, None].expand(n_rays, S, 3).reshape(-1, 3)
        sdf, feats = self.sdf_net(pts)
        grads = self.sdf_net.gradient(pts)
        inv_s = self.var_net(1).clamp(1e-6, 1e6)
        true_cos = (dirs * grads).sum(-1, keepdim=True)
        iter_cos = -F.relu(-true_cos)
        next_sdf = sdf + iter_cos * dists.reshape(-1, 1) * 0.5
        prev_sdf = sdf - iter_cos * dists.reshape(-1, 1) * 0.5
        prev_cdf, next_cdf = torch.sigmoid(prev_sdf * inv_s), torch.sigmoid(next_sdf * inv_s)
        alpha = ((prev_cdf - next_cdf + 1e-5) / (prev_cdf + 1e-5)).reshape(n_rays, S).clip(0.0, 1.0)
        trans = torch.cumprod(torch.cat([torch.ones(n_rays, 1), 1.0 - alpha + 1e-7], -1), -1)[:, :-1]
        weights = alpha * trans
        color = self.color_net(pts, F.normalize(grads, dim=-1), dirs, feats).reshape(n_rays, S, 3)
        return {"color": (color * weights[..., None]).sum(1), "weights_sum": weights.sum(-1, keepdim=True),
                "sdf": sdf, "gradients": grads}


class GenericTrainer(nn.Module):
    def __init__(self, conf):
        super().__init__()
        m = conf.model
        self.conf = conf
        self.sdf_network_finetune = SDFNetwork(m.sdf_hidden)
        self.variance_network_finetune = VarianceNetwork(m.init_variance)
        self.color_network = RenderingNetwork(m.sdf_hidden, m.color_hidden)
        self.renderer = NeuSRenderer(self.sdf_network_finetune, self.variance_network_finetune,
                                     self.color_network, m.n_samples)

    def get_trainable_params(self):
        return {"slower_params": list(self.sdf_network_finetune.parameters()),
                "params": list(self.variance_network_finetune.parameters()),
                "faster_params": list(self.color_network.parameters())}

    def cal_losses_sdf(self, render_out, true_rgb):
        m = self.conf.model
        color_loss = F.l1_loss(render_out["color"], true_rgb)
        sparse_loss = torch.exp(-m.sparse_scale_factor * render_out["sdf"].abs()).mean()
        eikonal = ((render_out["gradients"].norm(dim=-1) - 1.0) ** 2).mean()
        loss = color_loss + m.sparse_weight * sparse_loss + m.eikonal_weight * eikonal
        psnr = 20.0 * torch.log10(1.0 / (render_out["color"] - true_rgb).pow(2).mean().sqrt())
        return loss, {"color_mlp_loss": color_loss, "sparse_loss": sparse_loss,
                      "eikonal": eikonal, "psnr": psnr.detach()}

    def forward(self, rays_o, rays_d, true_rgb, mode="train"):
        d = self.conf.dataset
        render_out = self.renderer.render(rays_o, rays_d, d.near, d.far)
        loss, losses = self.cal_losses_sdf(render_out, true_rgb)
        return {"loss_lod0": loss, "losses_lod0": losses}


class ReplicaParallel(nn.Module):
    """Scatter the ray batch over `num_devices` replicas and gather their outputs
    the way torch.nn.DataParallel does."""

    def __init__(self, module, num_devices):
        super().__init__()
        self.module, self.num_devices = module, num_devices

    def forward(self, *inputs, **kwargs):
        chunks = list(zip(*[t.chunk(self.num_devices, dim=0) for t in inputs]))
        outputs = [self.module(*c, **kwargs) for c in chunks]
        return self.gather(outputs)

    def gather(self, outputs):
        first = outputs[0]
        if isinstance(first, dict):
            return {k: self.gather([o[k] for o in outputs]) for k in first}
        if first.dim() == 0:
            return torch.stack(outputs)
        return torch.cat(outputs, 0)


def sphere_rays(n, gen, radius=0.6):
    theta = torch.rand(n, generator=gen) * 2 * math.pi
    cam = torch.stack([2.0 * torch.cos(theta), 2.0 * torch.sin(theta), 0.3 * torch.ones(n)], -1)
    target = 0.4 * (torch.rand(n, 3, generator=gen) - 0.5)
    rays_d = F.normalize(target - cam, dim=-1)
    b = (cam * rays_d).sum(-1)
    disc = b ** 2 - (cam.pow(2).sum(-1) - radius ** 2)
    t_hit = -b - disc.clamp(min=0).sqrt()
    hit = cam + rays_d * t_hit[:, None]
    rgb = torch.where((disc > 0)[:, None], 0.5 + 0.5 * F.normalize(hit, dim=-1), torch.zeros(n, 3))
    return cam, rays_d, rgb


class Runner:
    def __init__(self, conf):
        self.conf = conf
        self.iter_step = 0
        self.base = GenericTrainer(conf)
        self.trainer = ReplicaParallel(self.base, conf.general.num_devices)
        self.learning_rate = conf.train.learning_rate
        p = self.base.get_trainable_params()
        self.params_to_train = p["slower_params"] + p["params"] + p["faster_params"]
        self.optimizer = torch.optim.Adam([
            {"params": p["slower_params"], "lr": self.learning_rate / 2.0},
            {"params": p["params"], "lr": self.learning_rate / 2.0},
            {"params": p["faster_params"]}], lr=self.learning_rate)
        self.gen = torch.Generator().manual_seed(conf.general.seed)

    def adjust_learning_rate(self):
        progress = min(self.iter_step / (self.conf.train.end_iter * 0.9), 1.0)
        factor = (math.cos(math.pi * progress) + 1.0) * 0.5 * 0.5 + 0.5
        gs = self.optimizer.param_groups
        gs[0]["lr"] = gs[1]["lr"] = self.learning_rate * factor * 0.5
        gs[2]["lr"] = self.learning_rate * factor

    def train(self):
        self.adjust_learning_rate()
        while self.iter_step < self.conf.train.end_iter:
            rays_o, rays_d, rgb = sphere_rays(self.conf.train.N_rays, self.gen)
            losses = self.trainer(rays_o, rays_d, rgb, mode="train")
            loss = losses["loss_lod0"]
            losses_lod0 = losses["losses_lod0"]
            self.optimizer.zero_grad()
            loss.backward()  # raises
            torch.nn.utils.clip_grad_norm_(self.params_to_train, 1.0)
            self.optimizer.step()
            self.iter_step += 1
            if self.iter_step % self.conf.train.report_freq == 0:
                print("iter:{:4d} loss = {:.4f} color = {:.4f} sparse = {:.4f} psnr = {:.2f}".format(
                    self.iter_step, float(loss.mean()), float(losses_lod0["color_mlp_loss"].mean()),
                    float(losses_lod0["sparse_loss"].mean()), float(losses_lod0["psnr"].mean())))
            if self.iter_step % self.conf.train.val_freq == 0:
                self.validate()
            self.adjust_learning_rate()

    def validate(self):
        rays_o, rays_d, rgb = sphere_rays(32, torch.Generator().manual_seed(123))
        out = self.base.renderer.render(rays_o, rays_d, self.conf.dataset.near, self.conf.dataset.far)
        mse = (out["color"].detach() - rgb).pow(2).mean().item()
        print("validate psnr: {:.2f}".format(-10.0 * math.log10(mse + 1e-12)))


def main():
    random.seed(CONF.general.seed)
    np.random.seed(CONF.general.seed)
    torch.manual_seed(CONF.general.seed)
    Runner(CONF).train()


if __name__ == "__main__":
    main()
