# expect: clean
# source: https://github.com/NVIDIAGameWorks/kaolin/issues/432
"""Fitting a textured sphere mesh to rendered views with a soft differentiable rasterizer.

Structured like Kaolin's DIB-R tutorial: a config dict, camera helpers (look-at + perspective
projection), a sphere template, learnable per-vertex shifts and a texture map, a soft silhouette /
colour splatting renderer, image + mask (IoU) + Laplacian-smoothness losses, Adam with a StepLR
schedule, an in-memory Timelapse that records the evolving mesh every few epochs, and a main().
Synthetic target views of a squashed sphere stand in for the rendered clock dataset.
"""
import math

import numpy as np
import torch
import torch.nn as nn

CONFIG = {
    "num_epoch": 6,
    "batch_size": 4,
    "laplacian_weight": 0.1,
    "image_weight": 0.1,
    "mask_weight": 1.0,
    "texture_lr": 5e-2,
    "vertice_lr": 5e-3,
    "scheduler_step_size": 3,
    "scheduler_gamma": 0.5,
    "texture_res": 16,
    "image_size": 32,
    "sigma": 0.02,
    "visualize_epoch_interval": 2,
    "num_views": 8,
}


def make_sphere(n_lat=8, n_lon=12):
    verts = []
    for i in range(n_lat + 1):
        theta = math.pi * i / n_lat
        for j in range(n_lon):
            phi = 2 * math.pi * j / n_lon
            verts.append([math.sin(theta) * math.cos(phi), math.cos(theta), math.sin(theta) * math.sin(phi)])
    faces = []
    for i in range(n_lat):
        for j in range(n_lon):
            a, b = i * n_lon + j, i * n_lon + (j + 1) % n_lon
            c, d = a + n_lon, b + n_lon
            faces += [[a, c, b], [b, c, d]]
    verts = torch.tensor(verts, dtype=torch.float32) * 0.5
    uvs = torch.stack([torch.atan2(verts[:, 2], verts[:, 0]) / (2 * math.pi) + 0.5, verts[:, 1] + 0.5], dim=-1)
    return verts, torch.tensor(faces, dtype=torch.long), uvs


def adjacency_laplacian(num_verts, faces):
    adj = torch.zeros(num_verts, num_verts)
    for f in faces.tolist():
        for i in range(3):
            adj[f[i], f[(i + 1) % 3]] = 1.0
            adj[f[(i + 1) % 3], f[i]] = 1.0
    deg = adj.sum(1, keepdim=True).clamp(min=1)
    return torch.eye(num_verts) - adj / deg


def look_at(azim, elev, dist):
    eye = torch.stack([dist * torch.cos(elev) * torch.sin(azim), dist * torch.sin(elev),
                       dist * torch.cos(elev) * torch.cos(azim)], dim=-1)
    forward = -eye / eye.norm(dim=-1, keepdim=True)
    up = torch.tensor([0.0, 1.0, 0.0]).expand_as(forward)
    right = torch.cross(up, forward, dim=-1)
    right = right / right.norm(dim=-1, keepdim=True)
    true_up = torch.cross(forward, right, dim=-1)
    rot = torch.stack([right, true_up, forward], dim=1)
    return rot, eye


def prepare_vertices(vertices, rot, eye, fovy=math.radians(40)):
    cam_verts = torch.einsum("bij,bnj->bni", rot, vertices - eye[:, None, :])
    focal = 1.0 / math.tan(fovy / 2)
    proj = focal * cam_verts[..., :2] / cam_verts[..., 2:3]
    return proj, cam_verts[..., 2]


class SoftSplatRenderer(nn.Module):
    """Gaussian splatting of projected vertices: differentiable silhouettes and colours."""

    def __init__(self, image_size, sigma):
        super().__init__()
        lin = torch.linspace(-1, 1, image_size)
        grid = torch.stack(torch.meshgrid(lin, lin, indexing="xy"), dim=-1).view(-1, 2)
        self.register_buffer("pixels", grid)
        self.image_size, self.sigma = image_size, sigma

    def forward(self, proj, depth, colors):
        d2 = ((self.pixels[None, :, None, :] - proj[:, None, :, :]) ** 2).sum(-1)
        w = torch.exp(-d2 / self.sigma) * torch.softmax(-depth, dim=-1)[:, None, :]
        mask = 1 - torch.exp(-w.sum(-1) * 20.0)
        rgb = torch.einsum("bpv,bvc->bpc", w / (w.sum(-1, keepdim=True) + 1e-6), colors)
        hw = (self.image_size, self.image_size)
        return rgb.view(-1, *hw, 3), mask.view(-1, *hw)


def sample_texture(texture_map, uvs, batch_size):
    grid = (uvs * 2 - 1).view(1, 1, -1, 2).expand(batch_size, -1, -1, -1)
    sampled = torch.nn.functional.grid_sample(texture_map.expand(batch_size, -1, -1, -1), grid, align_corners=False)
    return sampled[:, :, 0].permute(0, 2, 1)


class Timelapse:
    """Keeps snapshots of the optimised mesh (vertex arrays + material) for later viewing."""

    def __init__(self):
        self.frames = {}

    def add_mesh_batch(self, iteration, category, vertices_list=None, faces_list=None, materials_list=None):
        for i, vertices in enumerate(vertices_list):
            entry = {"points": vertices.cpu().float().numpy()}
            if faces_list is not None:
                entry["faces"] = faces_list[i].cpu().numpy()
            if materials_list is not None:
                entry["material"] = {k: v.cpu().numpy() for k, v in materials_list[i].items()}
            self.frames.setdefault(f"/{category}_{i}", {})[iteration] = entry


def make_dataset(template, cfg, generator):
    target_verts = template * torch.tensor([1.3, 0.7, 1.0])
    azim = torch.rand(cfg["num_views"], generator=generator) * 2 * math.pi
    elev = (torch.rand(cfg["num_views"], generator=generator) - 0.5) * 0.8
    colors = torch.sigmoid(target_verts @ torch.tensor([[2.0, -1.0, 0.5], [0.5, 2.0, -1.0], [-1.0, 0.5, 2.0]]))
    return target_verts, colors, azim, elev


class MeshFitter:
    def __init__(self, cfg):
        self.cfg = cfg
        self.template, self.faces, self.uvs = make_sphere()
        self.lap = adjacency_laplacian(self.template.shape[0], self.faces)
        self.renderer = SoftSplatRenderer(cfg["image_size"], cfg["sigma"])
        self.vertices_init = self.template.clone()
        self.vertice_shift = torch.zeros_like(self.template, requires_grad=True)
        self.texture_map = torch.full((1, 3, cfg["texture_res"], cfg["texture_res"]), 0.5, requires_grad=True)
        self.optim = torch.optim.Adam([{"params": [self.vertice_shift], "lr": cfg["vertice_lr"]},
                                       {"params": [self.texture_map], "lr": cfg["texture_lr"]}])
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optim, step_size=cfg["scheduler_step_size"],
                                                         gamma=cfg["scheduler_gamma"])
        self.timelapse = Timelapse()

    def recenter_vertices(self):
        vertices = self.vertices_init + self.vertice_shift
        return vertices - vertices.mean(0, keepdim=True)

    def render(self, vertices, azim, elev):
        rot, eye = look_at(azim, elev, torch.full_like(azim, 3.0))
        batch_vertices = vertices[None].expand(azim.shape[0], -1, -1)
        proj, depth = prepare_vertices(batch_vertices, rot, eye)
        colors = sample_texture(self.texture_map, self.uvs, azim.shape[0])
        return self.render_colors(proj, depth, colors)

    def render_colors(self, proj, depth, colors):
        return self.renderer(proj, depth, colors)

    def train_step(self, target_rgb, target_mask, azim, elev):
        self.optim.zero_grad()
        vertices = self.recenter_vertices()
        rgb, mask = self.render(vertices, azim, elev)
        image_loss = torch.mean(torch.abs(rgb - target_rgb))
        inter = (mask * target_mask).sum((1, 2))
        union = (mask + target_mask - mask * target_mask).sum((1, 2))
        mask_loss = torch.mean(1 - inter / union)
        laplacian_loss = (self.lap @ vertices).pow(2).sum(-1).mean()
        loss = (self.cfg["image_weight"] * image_loss + self.cfg["mask_weight"] * mask_loss
                + self.cfg["laplacian_weight"] * laplacian_loss)
        loss.backward()
        self.optim.step()
        return loss.item(), mask_loss.item()

    def log_mesh(self, epoch):
        with torch.no_grad():
            pbr_material = [{"diffuse_texture": self.texture_map[0].clamp(0, 1).detach()}]
            vertices_batch = self.recenter_vertices()[None]
            self.timelapse.add_mesh_batch(iteration=epoch + 1, category="optimized_mesh",
                                          vertices_list=[vertices_batch[0]], faces_list=[self.faces],
                                          materials_list=pbr_material)

    def fit(self, dataset):
        target_verts, target_colors, azim_all, elev_all = dataset
        with torch.no_grad():
            rot, eye = look_at(azim_all, elev_all, torch.full_like(azim_all, 3.0))
            proj, depth = prepare_vertices(target_verts[None].expand(len(azim_all), -1, -1), rot, eye)
            target_rgb, target_mask = self.render_colors(proj, depth, target_colors[None].expand(len(azim_all), -1, -1))
        bs = self.cfg["batch_size"]
        for epoch in range(self.cfg["num_epoch"]):
            losses = []
            for start in range(0, len(azim_all), bs):
                sl = slice(start, start + bs)
                losses.append(self.train_step(target_rgb[sl], target_mask[sl], azim_all[sl], elev_all[sl]))
            self.scheduler.step()
            print(f"epoch {epoch}: loss {np.mean([l[0] for l in losses]):.4f} mask {np.mean([l[1] for l in losses]):.4f}")
            if epoch % self.cfg["visualize_epoch_interval"] == 0:
                self.log_mesh(epoch)


def main():
    torch.manual_seed(0)
    fitter = MeshFitter(CONFIG)
    dataset = make_dataset(fitter.template, CONFIG, torch.Generator().manual_seed(0))
    fitter.fit(dataset)
    print("timelapse frames:", {k: sorted(v) for k, v in fitter.timelapse.frames.items()})


if __name__ == "__main__":
    main()
