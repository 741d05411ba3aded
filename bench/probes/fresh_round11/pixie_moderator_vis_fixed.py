# expect: clean
# source: https://github.com/yfeng95/PIXIE/pull/31
"""PIXIE-style whole-body reconstruction demo: an encoder regresses body/head/hand
parameters plus moderator weights that fuse the part experts, a decoder turns them
into SMPL-X-like vertices, and a Visualizer renders shape images, optionally
colouring the head/hand regions by the moderator confidence."""
import argparse
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


class Config:
    def __init__(self):
        self.n_verts = 300
        self.n_shape = 10
        self.n_pose = 21 * 3
        self.feat_dim = 64
        self.image_size = 32
        self.render_size = 24
        self.parts = ('head', 'left_hand', 'right_hand')


cfg = Config()


def color_map_color(value, vmin=0.0, vmax=1.0):
    # cheap 'cool' colormap: cyan -> magenta
    v = np.clip((value - vmin) / (vmax - vmin), 0, 1)
    return np.stack([v, 1 - v, np.ones_like(v)], axis=1)


def batch_orth_proj(X, camera):
    camera = camera.clone().view(-1, 1, 3)
    X_trans = X[:, :, :2] + camera[:, :, 1:]
    X_trans = torch.cat([X_trans, X[:, :, 2:]], 2)
    return camera[:, :, 0:1] * X_trans


class Encoder(nn.Module):
    def __init__(self, out_dim):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, out_dim)

    def forward(self, x):
        return self.fc(self.conv(x))


class Moderator(nn.Module):
    """Predicts how much to trust the part expert vs. the body expert."""
    def __init__(self, feat_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * feat_dim, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, body_feat, part_feat):
        w = self.net(torch.cat([body_feat, part_feat], dim=1))
        return F.softmax(w, dim=1)


class PIXIE(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.cfg = config
        self.body_encoder = Encoder(config.feat_dim)
        self.part_encoders = nn.ModuleDict({p: Encoder(config.feat_dim) for p in config.parts})
        self.moderators = nn.ModuleDict({p: Moderator(config.feat_dim) for p in config.parts})
        self.regressor = nn.Linear(config.feat_dim, config.n_shape + config.n_pose + 3)
        self.template = nn.Parameter(torch.randn(config.n_verts, 3) * 0.3, requires_grad=False)
        self.shapedirs = nn.Parameter(torch.randn(config.n_verts, 3, config.n_shape) * 0.01,
                                      requires_grad=False)

    def encode(self, data, threthold=True):
        body_feat = self.body_encoder(data['body']['image'])
        moderator_weight = {}
        fused = body_feat
        for part in self.cfg.parts:
            part_feat = self.part_encoders[part](data['body'][part + '_image'])
            w = self.moderators[part](body_feat, part_feat)
            if threthold:
                w = torch.where(w > 0.7, w, w * 0.5)
            moderator_weight[part] = w
            fused = fused + w[:, 1:2] * part_feat
        codes = self.regressor(fused)
        n_s, n_p = self.cfg.n_shape, self.cfg.n_pose
        codedict = {'shape': codes[:, :n_s], 'body_pose': codes[:, n_s:n_s + n_p],
                    'cam': codes[:, n_s + n_p:]}
        return {'body': codedict, 'moderator_weight': moderator_weight}

    def decode(self, codedict):
        verts = self.template[None] + torch.einsum('vdk,bk->bvd', self.shapedirs, codedict['shape'])
        verts = verts + 0.01 * codedict['body_pose'][:, :3].unsqueeze(1)
        trans_verts = batch_orth_proj(verts, codedict['cam'])
        return {'vertices': verts, 'transformed_vertices': trans_verts, 'cam': codedict['cam']}


class Visualizer(object):
    ''' visualizer '''
    def __init__(self, render_size=24, config=None, device='cpu'):
        self.cfg = config
        self.device = device
        self.render_size = render_size
        n = config.n_verts
        idx = np.arange(n)
        self.part_idx = {'head': idx[: n // 6],
                         'left_hand': idx[n // 6: n // 4],
                         'right_hand': idx[n // 4: n // 3]}

    def render_shape(self, transformed_vertices, colors=None):
        # splat vertices onto an image grid (stand-in for the rasterizer)
        b, nv, _ = transformed_vertices.shape
        size = self.render_size
        img = torch.zeros(b, 3, size, size)
        xy = ((transformed_vertices[:, :, :2].detach().clamp(-1, 1) + 1) / 2 * (size - 1)).long()
        if colors is None:
            colors = torch.full((b, nv, 3), 0.8)
        for i in range(b):
            img[i, :, xy[i, :, 1], xy[i, :, 0]] = colors[i].t().detach()
        return img

    def render_results(self, opdict, input_images, moderator_weight=None):
        batch_size, nv, _ = opdict['vertices'].shape
        shape_images = self.render_shape(opdict['transformed_vertices'])
        visdict = {'inputs': F.interpolate(input_images, [self.render_size, self.render_size]),
                   'shape_images': shape_images}
        if moderator_weight is not None:
            colors = torch.tensor([1.0, 1.0, 0.9])[None, None, :].repeat(batch_size, nv, 1).float()
            for part in moderator_weight.keys():
                weight = moderator_weight[part].cpu().detach().numpy()[:, 0]
                curr_color = torch.from_numpy(color_map_color(weight)).float().to(self.device)
                colors[:, self.part_idx[part], :] = curr_color[:, None, :]
            opdict['vertex_colors'] = colors
            visdict['color_shape_images'] = self.render_shape(opdict['transformed_vertices'], colors)
        return visdict

    def visualize_grid(self, visdict):
        grid = torch.cat([v[0] for v in visdict.values()], dim=2)
        grid_image = (grid.detach().numpy().transpose(1, 2, 0).copy() * 255)
        return np.minimum(np.maximum(grid_image, 0), 255).astype(np.uint8)


def make_test_batch(config):
    s = config.image_size
    batch = {'image': torch.rand(1, 3, s, s), 'name': 'sample_000'}
    for part in config.parts:
        batch[part + '_image'] = torch.rand(1, 3, s // 2, s // 2)
    return batch


def main(args):
    pixie = PIXIE(config=cfg)
    visualizer = Visualizer(render_size=args.render_size, config=cfg, device=args.device)
    testdata = [make_test_batch(cfg) for _ in range(2)]

    for i, batch in enumerate(testdata):
        data = {'body': batch}
        param_dict = pixie.encode(data, threthold=True)
        moderator_weight = param_dict['moderator_weight']
        codedict = param_dict['body']
        opdict = pixie.decode(codedict)
        if args.saveVis:
            if args.showWeight is False:
                moderator_weight = None
            visdict = visualizer.render_results(opdict, data['body']['image'],
                                                moderator_weight=moderator_weight)
            grid = visualizer.visualize_grid(visdict)
            print(f"{batch['name']}_{i}: vis grid {grid.shape}, keys {sorted(visdict)}")


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description='PIXIE')
    parser.add_argument('--device', default='cpu', type=str)
    parser.add_argument('--render_size', default=24, type=int)
    parser.add_argument('--saveVis', default=True, type=lambda x: x.lower() in ['true', '1'])
    parser.add_argument('--showWeight', default=True, type=lambda x: x.lower() in ['true', '1'])
    main(parser.parse_args([]))
