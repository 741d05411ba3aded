# expect: freed_graph
# source: https://github.com/facebookresearch/pytorch3d/issues/644
"""Fit a deformable sphere mesh to multi-view silhouettes (PyTorch3D-style).

Follows the structure of the PyTorch3D "fit a mesh via rendering" tutorial:
a source ico-sphere-like mesh is deformed by per-vertex offsets plus a
learnable anisotropic scale (scale_xyz), rendered from several cameras with
a soft silhouette rasterizer, and compared with target silhouettes of an
ellipsoid.  Shape-prior losses (edge length, Laplacian smoothing, normal
consistency) regularize the deformation.  A small Meshes container, soft
point-splat silhouette renderer and camera objects replace the library.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class FitConfig:
    n_iter: int = 4
    num_views: int = 6
    num_views_per_iteration: int = 2
    image_size: int = 24
    sigma: float = 0.05
    lr: float = 1.0
    momentum: float = 0.9
    plot_period: int = 2
    losses: dict = field(default_factory=lambda: {
        "silhouette": {"weight": 1.0, "values": []},
        "edge": {"weight": 1.0, "values": []},
        "normal": {"weight": 0.01, "values": []},
        "laplacian": {"weight": 1.0, "values": []},
    })


# ------------------------------------------------------------------ geometry
class Meshes:
    def __init__(self, verts, faces):
        self._verts = verts
        self._faces = faces

    def verts_packed(self):
        return self._verts

    def faces_packed(self):
        return self._faces

    def offset_verts(self, offsets):
        return Meshes(self._verts + offsets, self._faces)

    def scale_verts(self, scale):
        return Meshes(self._verts * scale, self._faces)

    @property
    def edges_packed(self):
        f = self._faces
        e = torch.cat([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]], 0)
        e, _ = e.sort(dim=1)
        return torch.unique(e, dim=0)


def uv_sphere(n_lat=6, n_lon=8):
    verts = [[0.0, 0.0, 1.0]]
    for i in range(1, n_lat):
        theta = math.pi * i / n_lat
        for j in range(n_lon):
            phi = 2 * math.pi * j / n_lon
            verts.append([math.sin(theta) * math.cos(phi), math.sin(theta) * math.sin(phi), math.cos(theta)])
    verts.append([0.0, 0.0, -1.0])
    faces = []
    for j in range(n_lon):
        faces.append([0, 1 + j, 1 + (j + 1) % n_lon])
    for i in range(n_lat - 2):
        for j in range(n_lon):
            a = 1 + i * n_lon + j
            b = 1 + i * n_lon + (j + 1) % n_lon
            faces.append([a, a + n_lon, b])
            faces.append([b, a + n_lon, b + n_lon])
    last = len(verts) - 1
    for j in range(n_lon):
        a = 1 + (n_lat - 2) * n_lon + j
        b = 1 + (n_lat - 2) * n_lon + (j + 1) % n_lon
        faces.append([a, last, b])
    return Meshes(torch.tensor(verts), torch.tensor(faces, dtype=torch.long))


def mesh_edge_loss(mesh, target_length=0.0):
    verts = mesh.verts_packed()
    e = mesh.edges_packed
    lengths = (verts[e[:, 0]] - verts[e[:, 1]]).norm(dim=1)
    return ((lengths - target_length) ** 2).mean()


def mesh_laplacian_smoothing(mesh):
    verts = mesh.verts_packed()
    e = mesh.edges_packed
    V = verts.shape[0]
    idx = torch.cat([e, e.flip(1)], 0)
    deg = torch.zeros(V).index_add_(0, idx[:, 0], torch.ones(idx.shape[0]))
    neigh = torch.zeros_like(verts).index_add_(0, idx[:, 0], verts[idx[:, 1]])
    lap = neigh / deg.clamp(min=1).unsqueeze(1) - verts
    return lap.norm(dim=1).mean()


def mesh_normal_consistency(mesh):
    verts, faces = mesh.verts_packed(), mesh.faces_packed()
    v0, v1, v2 = verts[faces[:, 0]], verts[faces[:, 1]], verts[faces[:, 2]]
    n = F.normalize(torch.cross(v1 - v0, v2 - v0, dim=1), dim=1)
    centroid_dir = F.normalize((v0 + v1 + v2) / 3.0, dim=1)
    return (1 - (n * centroid_dir).sum(1)).mean()


# ----------------------------------------------------------------- rendering
class FoVOrthographicCameras:
    def __init__(self, R, T):
        self.R, self.T = R, T

    def transform_points(self, pts):
        return pts @ self.R.transpose(0, 1) + self.T


def look_at_rotation(azim):
    c, s = math.cos(azim), math.sin(azim)
    return torch.tensor([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])


class SoftSilhouetteRenderer:
    def __init__(self, image_size, sigma):
        lin = torch.linspace(-1.5, 1.5, image_size)
        gy, gx = torch.meshgrid(lin, lin, indexing="ij")
        self.grid = torch.stack([gx, gy], -1).view(-1, 2)
        self.image_size = image_size
        self.sigma = sigma

    def __call__(self, mesh, cameras):
        verts, faces = mesh.verts_packed(), mesh.faces_packed()
        centers = (verts[faces[:, 0]] + verts[faces[:, 1]] + verts[faces[:, 2]]) / 3.0
        pts = torch.cat([verts, centers], 0)
        xy = cameras.transform_points(pts)[:, :2]
        d2 = ((self.grid[:, None, :] - xy[None, :, :]) ** 2).sum(-1)
        prob = torch.exp(-d2 / self.sigma)
        alpha = 1 - torch.prod(1 - prob.clamp(max=0.999), dim=1)
        return alpha.view(self.image_size, self.image_size)


# ------------------------------------------------------------------- fitting
class MeshFitter:
    def __init__(self, cfg, src_mesh, target_cameras, target_silhouettes):
        self.cfg = cfg
        self.src_mesh = src_mesh
        self.cameras = target_cameras
        self.targets = target_silhouettes
        self.renderer = SoftSilhouetteRenderer(cfg.image_size, cfg.sigma)
        verts_shape = src_mesh.verts_packed().shape
        self.deform_verts = torch.full(verts_shape, 0.0, requires_grad=True)
        self.scale_xyz = torch.tensor([[1.0, 1.0, 1.0]], requires_grad=True)
        self.scale_xyz_ = torch.nn.functional.relu(self.scale_xyz)
        self.optimizer = torch.optim.SGD([self.deform_verts, self.scale_xyz],
                                         lr=cfg.lr, momentum=cfg.momentum)
        self.callbacks = []

    def current_mesh(self):
        new_src_mesh = self.src_mesh.offset_verts(self.deform_verts)
        return new_src_mesh.scale_verts(self.scale_xyz_)

    def update_mesh_shape_prior_losses(self, mesh, loss):
        loss["edge"] = mesh_edge_loss(mesh)
        loss["normal"] = mesh_normal_consistency(mesh)
        loss["laplacian"] = mesh_laplacian_smoothing(mesh)

    def train_step(self, it):
        self.optimizer.zero_grad()
        new_src_mesh = self.current_mesh()
        loss = {k: torch.tensor(0.0) for k in self.cfg.losses}
        self.update_mesh_shape_prior_losses(new_src_mesh, loss)
        views = np.random.permutation(self.cfg.num_views).tolist()[:self.cfg.num_views_per_iteration]
        for j in views:
            images_predicted = self.renderer(new_src_mesh, self.cameras[j])
            loss_silhouette = ((images_predicted - self.targets[j]) ** 2).mean()
            loss["silhouette"] += loss_silhouette / self.cfg.num_views_per_iteration
        sum_loss = torch.tensor(0.0)
        for k, l in loss.items():
            sum_loss = sum_loss + l * self.cfg.losses[k]["weight"]
            self.cfg.losses[k]["values"].append(float(l.detach()))
        sum_loss.backward()  # raises
        self.optimizer.step()
        for cb in self.callbacks:
            cb(it, sum_loss.item(), self)
        return sum_loss.item()

    @torch.no_grad()
    def evaluate(self):
        mesh = self.current_mesh()
        ious = []
        for cam, tgt in zip(self.cameras, self.targets):
            pred = self.renderer(mesh, cam) > 0.5
            gt = tgt > 0.5
            ious.append((pred & gt).sum().item() / max((pred | gt).sum().item(), 1))
        return float(np.mean(ious))

    def fit(self):
        for i in range(self.cfg.n_iter):
            self.train_step(i)
        return self.evaluate()


def progress_callback(period):
    def _cb(it, value, fitter):
        if it % period == 0:
            print("iter %d  total loss %.4f  scale %s" % (it, value, fitter.scale_xyz.detach().tolist()))
    return _cb


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    cfg = FitConfig()
    src_mesh = uv_sphere()
    target_mesh = uv_sphere().scale_verts(torch.tensor([[1.2, 0.8, 1.0]]))
    azims = np.linspace(0, 2 * math.pi, cfg.num_views, endpoint=False)
    cameras = [FoVOrthographicCameras(R=look_at_rotation(a), T=torch.zeros(3)) for a in azims]
    renderer = SoftSilhouetteRenderer(cfg.image_size, cfg.sigma)
    with torch.no_grad():
        targets = [renderer(target_mesh, cam) for cam in cameras]
    fitter = MeshFitter(cfg, src_mesh, cameras, targets)
    fitter.callbacks.append(progress_callback(cfg.plot_period))
    print("mean silhouette IoU: %.3f" % fitter.fit())


if __name__ == "__main__":
    main()
