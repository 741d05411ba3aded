# expect: clean
# source: https://github.com/brentyi/tilted/issues/2
"""TensoRF (VM decomposition) with a learnable TILTED rotation of the factorized frame.

TensoRF's TensorVMSplit is condensed: density / appearance are vector-matrix factorized
fields sampled with grid_sample, an MLP renders colour, and get_optparam_groups hands the
optimizer its parameter groups.  Following the TILTED paper, the sample points are
rotated by a learnable axis-angle before the factorized fields are queried, so the
decomposition can align with the scene.  Synthetic orbit views of a tilted textured box.
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


def config_parser(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--n_iters", type=int, default=20)
    parser.add_argument("--lr_init", type=float, default=0.02)
    parser.add_argument("--lr_basis", type=float, default=1e-3)
    parser.add_argument("--lr_decay_target_ratio", type=float, default=0.1)
    parser.add_argument("--N_voxel_init", type=int, default=16 ** 3)
    parser.add_argument("--n_lamb_sigma", type=int, action="append", default=[4, 4, 4])
    parser.add_argument("--n_lamb_sh", type=int, action="append", default=[4, 4, 4])
    parser.add_argument("--data_dim_color", type=int, default=9)
    parser.add_argument("--nSamples", type=int, default=32)
    parser.add_argument("--learnable_rotation", type=int, default=1)
    return parser.parse_args(argv)


def axis_angle_to_matrix(axis_angle):
    """Rodrigues; double precision keeps sin(theta)/theta well behaved near the identity."""
    theta = torch.linalg.norm(axis_angle) + 1e-12
    k = axis_angle / theta
    K = torch.zeros(3, 3, dtype=axis_angle.dtype)
    K = K + torch.stack([torch.stack([0 * k[0], -k[2], k[1]]),
                         torch.stack([k[2], 0 * k[0], -k[0]]),
                         torch.stack([-k[1], k[0], 0 * k[0]])])
    eye = torch.eye(3, dtype=axis_angle.dtype)
    return eye + torch.sin(theta) * K + (1 - torch.cos(theta)) * (K @ K)


class TensorVMSplit(torch.nn.Module):
    def __init__(self, aabb, gridSize, device, density_n_comp=(4, 4, 4), appearance_n_comp=(4, 4, 4),
                 app_dim=9, density_shift=-10, distance_scale=25, learnable_rotation=False):
        super().__init__()
        self.aabb, self.device = aabb.to(device), device
        self.gridSize = torch.LongTensor(gridSize)
        self.density_n_comp, self.app_n_comp, self.app_dim = density_n_comp, appearance_n_comp, app_dim
        self.density_shift, self.distanceScale = density_shift, distance_scale
        self.matMode, self.vecMode = [[0, 1], [0, 2], [1, 2]], [2, 1, 0]
        self.density_plane, self.density_line = self.init_svd_volume(self.density_n_comp, 0.1, device)
        self.app_plane, self.app_line = self.init_svd_volume(self.app_n_comp, 0.1, device)
        self.basis_mat = torch.nn.Linear(sum(self.app_n_comp), self.app_dim, bias=False).to(device)
        self.renderModule = torch.nn.Sequential(torch.nn.Linear(app_dim + 3, 64), torch.nn.ReLU(),
                                                torch.nn.Linear(64, 3)).to(device)
        self.learnable_rotation = learnable_rotation
        if learnable_rotation:
            self.angleaxis = torch.nn.Parameter(torch.tensor([0, 0, 0], dtype=torch.float32).to(
                device=device, dtype=torch.float64))

    def init_svd_volume(self, n_component, scale, device):
        plane_coef, line_coef = [], []
        for i in range(len(self.vecMode)):
            vec_id = self.vecMode[i]
            mat_id_0, mat_id_1 = self.matMode[i]
            plane_coef.append(torch.nn.Parameter(
                scale * torch.randn((1, n_component[i], self.gridSize[mat_id_1], self.gridSize[mat_id_0]))))
            line_coef.append(torch.nn.Parameter(scale * torch.randn((1, n_component[i], self.gridSize[vec_id], 1))))
        return torch.nn.ParameterList(plane_coef).to(device), torch.nn.ParameterList(line_coef).to(device)

    def get_optparam_groups(self, lr_init_spatialxyz=0.02, lr_init_network=0.001):
        grad_vars = [{'params': self.density_line, 'lr': lr_init_spatialxyz},
                     {'params': self.density_plane, 'lr': lr_init_spatialxyz},
                     {'params': self.app_line, 'lr': lr_init_spatialxyz},
                     {'params': self.app_plane, 'lr': lr_init_spatialxyz},
                     {'params': self.basis_mat.parameters(), 'lr': lr_init_network},
                     {'params': self.renderModule.parameters(), 'lr': lr_init_network}]
        if self.learnable_rotation:
            grad_vars += [{'params': [self.angleaxis], 'lr': lr_init_network}]
        return grad_vars

    def normalize_coord(self, xyz_sampled):
        if self.learnable_rotation:
            R = axis_angle_to_matrix(self.angleaxis).to(xyz_sampled.dtype)
            xyz_sampled = xyz_sampled @ R.T
        invaabbSize = 2.0 / (self.aabb[1] - self.aabb[0])
        return (xyz_sampled - self.aabb[0]) * invaabbSize - 1

    def _coords(self, xyz):
        coordinate_plane = torch.stack([xyz[..., self.matMode[i]] for i in range(3)]).view(3, -1, 1, 2)
        coordinate_line = torch.stack([xyz[..., self.vecMode[i]] for i in range(3)])
        coordinate_line = torch.stack((torch.zeros_like(coordinate_line), coordinate_line), dim=-1).view(3, -1, 1, 2)
        return coordinate_plane, coordinate_line

    def compute_densityfeature(self, xyz_sampled):
        coordinate_plane, coordinate_line = self._coords(xyz_sampled)
        sigma_feature = torch.zeros((xyz_sampled.shape[0],))
        for idx in range(len(self.density_plane)):
            plane = F.grid_sample(self.density_plane[idx], coordinate_plane[[idx]], align_corners=True).view(-1, *xyz_sampled.shape[:1])
            line = F.grid_sample(self.density_line[idx], coordinate_line[[idx]], align_corners=True).view(-1, *xyz_sampled.shape[:1])
            sigma_feature = sigma_feature + torch.sum(plane * line, dim=0)
        return sigma_feature

    def compute_appfeature(self, xyz_sampled):
        coordinate_plane, coordinate_line = self._coords(xyz_sampled)
        plane_coef, line_coef = [], []
        for idx in range(len(self.app_plane)):
            plane_coef.append(F.grid_sample(self.app_plane[idx], coordinate_plane[[idx]], align_corners=True).view(-1, *xyz_sampled.shape[:1]))
            line_coef.append(F.grid_sample(self.app_line[idx], coordinate_line[[idx]], align_corners=True).view(-1, *xyz_sampled.shape[:1]))
        return self.basis_mat((torch.cat(plane_coef) * torch.cat(line_coef)).T)

    def sample_ray(self, rays_o, rays_d, N_samples, near=0.5, far=3.0):
        interpx = torch.linspace(near, far, N_samples).unsqueeze(0)
        rays_pts = rays_o[..., None, :] + rays_d[..., None, :] * interpx[..., None]
        mask_outbbox = ((self.aabb[0] > rays_pts) | (rays_pts > self.aabb[1])).any(dim=-1)
        return rays_pts, interpx.expand(rays_o.shape[0], -1), ~mask_outbbox

    def forward(self, rays_chunk, N_samples):
        xyz_sampled, z_vals, ray_valid = self.sample_ray(rays_chunk[:, :3], rays_chunk[:, 3:6], N_samples)
        dists = torch.cat((z_vals[:, 1:] - z_vals[:, :-1], torch.zeros_like(z_vals[:, :1])), dim=-1)
        viewdirs = rays_chunk[:, 3:6].view(-1, 1, 3).expand(xyz_sampled.shape)
        xyz = self.normalize_coord(xyz_sampled).reshape(-1, 3)
        sigma = F.softplus(self.compute_densityfeature(xyz) + self.density_shift + 10).view(z_vals.shape)
        sigma = sigma * ray_valid
        alpha = 1. - torch.exp(-sigma * dists * self.distanceScale)
        T = torch.cumprod(torch.cat([torch.ones(alpha.shape[0], 1), 1. - alpha + 1e-10], -1), -1)
        weight = alpha * T[:, :-1]
        app_features = self.compute_appfeature(xyz)
        rgb = torch.sigmoid(self.renderModule(torch.cat([app_features, viewdirs.reshape(-1, 3)], -1))).view(*z_vals.shape, 3)
        acc_map = torch.sum(weight, -1)
        rgb_map = torch.sum(weight[..., None] * rgb, -2) + (1. - acc_map[..., None])
        return rgb_map.clamp(0, 1), torch.sum(weight * z_vals, -1)


def make_dataset(n_views=8, res=12, tilt=0.5):
    rays, rgbs = [], []
    c, s = np.cos(tilt), np.sin(tilt)
    R_true = torch.tensor([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=torch.float32)
    for theta in np.linspace(0, 2 * np.pi, n_views, endpoint=False):
        cam = torch.tensor([2.0 * np.cos(theta), 2.0 * np.sin(theta), 0.5], dtype=torch.float32)
        fwd = F.normalize(-cam, dim=0)
        right = F.normalize(torch.linalg.cross(fwd, torch.tensor([0, 0, 1.0])), dim=0)
        up = torch.linalg.cross(right, fwd)
        u, v = torch.meshgrid(torch.linspace(-0.4, 0.4, res), torch.linspace(-0.4, 0.4, res), indexing="ij")
        d = F.normalize(fwd + u.reshape(-1, 1) * right + v.reshape(-1, 1) * up, dim=-1)
        o = cam.expand_as(d)
        t = torch.linspace(0.5, 3.0, 64)
        pts = (o[:, None] + d[:, None] * t[None, :, None]) @ R_true
        inside = (pts.abs() < 0.6).all(-1)
        first = torch.where(inside.any(1), inside.float().argmax(1), torch.full((len(d),), 63))
        hit = pts[torch.arange(len(d)), first]
        colour = torch.where(inside.any(1)[:, None], 0.5 + 0.5 * torch.sin(6 * hit), torch.ones(len(d), 3))
        rays.append(torch.cat([o, d], -1))
        rgbs.append(colour)
    return torch.cat(rays), torch.cat(rgbs)


def reconstruction(args):
    device = torch.device("cpu")
    allrays, allrgbs = make_dataset()
    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    reso_cur = [int(round(args.N_voxel_init ** (1 / 3)))] * 3
    tensorf = TensorVMSplit(aabb, reso_cur, device, density_n_comp=args.n_lamb_sigma[:3],
                            appearance_n_comp=args.n_lamb_sh[:3], app_dim=args.data_dim_color,
                            learnable_rotation=bool(args.learnable_rotation))
    grad_vars = tensorf.get_optparam_groups(args.lr_init, args.lr_basis)
    lr_factor = args.lr_decay_target_ratio ** (1 / args.n_iters)
    optimizer = torch.optim.Adam(grad_vars, betas=(0.9, 0.99))

    PSNRs = []
    for iteration in range(args.n_iters):
        ray_idx = torch.randint(0, allrays.shape[0], (args.batch_size,))
        rgb_map, depth_map = tensorf(allrays[ray_idx], N_samples=args.nSamples)
        loss = torch.mean((rgb_map - allrgbs[ray_idx]) ** 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        PSNRs.append(-10.0 * np.log(loss.detach().item()) / np.log(10.0))
        for param_group in optimizer.param_groups:
            param_group['lr'] = param_group['lr'] * lr_factor
        if iteration % 10 == 0:
            rot = tensorf.angleaxis.detach().numpy() if args.learnable_rotation else None
            print(f"Iteration {iteration:05d}: train_psnr = {float(np.mean(PSNRs)):.2f} rotation = {rot}")
            PSNRs = []
    with torch.no_grad():
        rgb_map, _ = tensorf(allrays[:256], N_samples=args.nSamples)
        print(f"test mse = {torch.mean((rgb_map - allrgbs[:256]) ** 2).item():.4f}")


if __name__ == "__main__":
    reconstruction(config_parser([]))
