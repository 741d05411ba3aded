# expect: clean
# source: https://github.com/NVlabs/CTG/issues/3
"""Controllable traffic generation (CTG / tbsim layout) with test-time guidance.

A trajectory diffusion model denoises agent-centric future trajectories
(x, y, speed, yaw); at sampling time a rule-based guidance loss such as
`ChangeToLeftLane` or `KeepDistanceLoss` is evaluated on the predicted clean
trajectory in world coordinates and its gradient w.r.t. the noisy sample steers
the denoising step.  A small `DiffuserTrafficModel` is first fit on synthetic
lane-following demonstrations, then sampled with guidance.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = SimpleNamespace(
    num_agents=4, horizon=10, state_dim=4, hidden=64, n_diffusion_steps=8,
    train_steps=20, lr=1e-3, guidance_scale=0.5, guide_every=1, lane_width=3.5, seed=0,
    guidance=SimpleNamespace(name="change_to_left_lane", weight=1.0, min_dist=4.0),
)


def round_2pi(x):
    return torch.remainder(x + np.pi, 2 * np.pi) - np.pi


def transform_points_tensor(points, transf_matrix):
    num_dims = transf_matrix.shape[-1] - 1
    transf_matrix = torch.permute(transf_matrix, (0, 2, 1))
    return points @ transf_matrix[:, :num_dims, :num_dims] + transf_matrix[:, -1:, :num_dims]


def transform_agents_to_world(pos_pred, yaw_pred, batch_world_from_agent):
    """pos_pred (B, S, T, 2), yaw_pred (B, S, T, 1), batch_world_from_agent (B, 3, 3)."""
    bsize, num_samp, t, _ = pos_pred.size()
    pos_pred = pos_pred.reshape((bsize * num_samp, t, 2))
    mats = batch_world_from_agent.unsqueeze(1).expand((bsize, num_samp, 3, 3)).reshape((bsize * num_samp, 3, 3))
    agents_fut_pos = transform_points_tensor(pos_pred, mats).reshape((bsize, num_samp, t, 2))
    hvec = torch.cat([torch.cos(yaw_pred), torch.sin(yaw_pred)], dim=-1).reshape((bsize * num_samp, t, 2))
    world_hvec = transform_points_tensor(hvec, mats).reshape((bsize, num_samp, t, 2))
    world_origin = mats[:, :2, 2].reshape((bsize, num_samp, 1, 2))
    world_hvec = world_hvec - world_origin
    agents_fut_yaw = torch.atan2(world_hvec[..., 1], world_hvec[..., 0]).unsqueeze(-1)
    return agents_fut_pos, agents_fut_yaw


def transform_matrices(angles, translations):
    c, s = torch.cos(angles), torch.sin(angles)
    last = torch.tensor([[0.0, 0.0, 1.0]]).expand((angles.shape[0], -1))
    return torch.stack([torch.stack([c, -s, translations[:, 0]], -1),
                        torch.stack([s, c, translations[:, 1]], -1), last], dim=-2)


class GuidanceLoss(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight

    def world_states(self, x, data_batch):
        pos_pred = x[..., :2]
        yaw_pred = x[..., 3:4]
        pos_w, yaw_w = transform_agents_to_world(pos_pred, yaw_pred.clone(), data_batch["world_from_agent"])
        return pos_pred, yaw_pred, pos_w, yaw_w


class ChangeToLeftLane(GuidanceLoss):
    """Reach the lane to the left of the current one and align with it."""

    def __init__(self, weight, lane_width):
        super().__init__(weight)
        self.lane_width = lane_width

    def forward(self, x, data_batch):
        pos_pred, yaw_pred, pos_w, yaw_w = self.world_states(x, data_batch)
        target_y = data_batch["lane_y"][:, None, None] + self.lane_width
        lateral = (pos_w[..., -3:, 1] - target_y) ** 2
        heading = round_2pi(yaw_w[..., -3:, 0] - data_batch["lane_yaw"][:, None, None]) ** 2
        # lane-relative yaw in the agent frame, for the turn-rate penalty
        yaw_pred -= data_batch["lane_yaw_agent"][:, None, None, None]
        turn = (yaw_pred[..., 1:, 0] - yaw_pred[..., :-1, 0]) ** 2
        return self.weight * (lateral.mean(-1) + 0.1 * heading.mean(-1) + 0.01 * turn.mean(-1))


class KeepDistanceLoss(GuidanceLoss):
    def __init__(self, weight, min_dist):
        super().__init__(weight)
        self.min_dist = min_dist

    def forward(self, x, data_batch):
        _, _, pos_w, _ = self.world_states(x, data_batch)
        d = torch.cdist(pos_w[:, 0].transpose(0, 1), pos_w[:, 0].transpose(0, 1))
        pen = F.relu(self.min_dist - d - 1e3 * torch.eye(d.shape[-1]))
        return self.weight * pen.mean(dim=(0, 2)).unsqueeze(1)


GUIDANCE = {
    "change_to_left_lane": lambda g: ChangeToLeftLane(g.weight, cfg.lane_width),
    "keep_distance": lambda g: KeepDistanceLoss(g.weight, g.min_dist),
}


class DenoiserMLP(nn.Module):
    def __init__(self, horizon, state_dim, hidden, n_steps):
        super().__init__()
        d = horizon * state_dim
        self.t_emb = nn.Embedding(n_steps, hidden)
        self.net = nn.Sequential(nn.Linear(d + hidden + 3, hidden), nn.Mish(), nn.Linear(hidden, hidden),
                                 nn.Mish(), nn.Linear(hidden, d))
        self.horizon, self.state_dim = horizon, state_dim

    def forward(self, x, t, cond):
        b, s = x.shape[:2]
        flat = x.reshape(b * s, -1)
        te = self.t_emb(t).unsqueeze(1).expand(b, s, -1).reshape(b * s, -1)
        c = cond.unsqueeze(1).expand(b, s, -1).reshape(b * s, -1)
        out = self.net(torch.cat([flat, te, c], dim=-1))
        return out.reshape(b, s, self.horizon, self.state_dim)


class DiffuserTrafficModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = DenoiserMLP(c.horizon, c.state_dim, c.hidden, c.n_diffusion_steps)
        betas = torch.linspace(1e-3, 0.2, c.n_diffusion_steps)
        alphas_cumprod = torch.cumprod(1 - betas, 0)
        self.register_buffer("betas", betas)
        self.register_buffer("alphas_cumprod", alphas_cumprod)
        self.current_guidance = None

    def set_guidance(self, guidance_cfg):
        self.current_guidance = GUIDANCE[guidance_cfg.name](guidance_cfg)

    def q_sample(self, x0, t, noise):
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def predict_start_from_noise(self, x_t, t, eps):
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        return (x_t - (1 - a).sqrt() * eps) / a.sqrt()

    def compute_losses(self, data_batch):
        x0 = data_batch["target_traj"]
        t = torch.randint(0, self.c.n_diffusion_steps, (x0.shape[0],))
        noise = torch.randn_like(x0)
        eps = self.model(self.q_sample(x0, t, noise), t, data_batch["cond"])
        return F.mse_loss(eps, noise)

    def guidance_grad(self, x_t, t, data_batch):
        with torch.enable_grad():
            x_t = x_t.detach().requires_grad_(True)
            eps = self.model(x_t, t, data_batch["cond"])
            x0 = self.predict_start_from_noise(x_t, t, eps)
            loss = self.current_guidance(x0, data_batch).sum()
            grad = torch.autograd.grad(loss, x_t)[0]
        return grad, eps.detach()

    @torch.no_grad()
    def sample(self, data_batch, num_samp=2):
        b = data_batch["cond"].shape[0]
        x = torch.randn(b, num_samp, self.c.horizon, self.c.state_dim)
        for step in reversed(range(self.c.n_diffusion_steps)):
            t = torch.full((b,), step, dtype=torch.long)
            if self.current_guidance is not None and step % self.c.guide_every == 0:
                grad, eps = self.guidance_grad(x, t, data_batch)
            else:
                grad, eps = torch.zeros_like(x), self.model(x, t, data_batch["cond"])
            x0 = self.predict_start_from_noise(x, t, eps) - self.c.guidance_scale * grad
            if step > 0:
                a_prev = self.alphas_cumprod[step - 1]
                x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * torch.randn_like(x)
            else:
                x = x0
        return x


def make_batch(c, rng):
    n = c.num_agents
    start = torch.tensor(rng.uniform(-20, 20, size=(n, 2)), dtype=torch.float32)
    heading = torch.tensor(rng.uniform(-0.2, 0.2, size=n), dtype=torch.float32)
    speed = torch.tensor(rng.uniform(5, 12, size=n), dtype=torch.float32)
    ts = torch.arange(1, c.horizon + 1, dtype=torch.float32) * 0.1
    traj = torch.zeros(n, 1, c.horizon, c.state_dim)
    traj[..., 0] = speed[:, None, None] * ts
    traj[..., 2] = speed[:, None, None]
    lane_y = start[:, 1] + torch.tensor(rng.normal(0, 0.3, size=n), dtype=torch.float32)
    return {
        "target_traj": traj,
        "cond": torch.stack([speed / 10, heading, lane_y / 20], dim=-1),
        "world_from_agent": transform_matrices(heading, start),
        "lane_y": lane_y,
        "lane_yaw": torch.zeros(n),
        "lane_yaw_agent": -heading,
    }


def main():
    torch.manual_seed(cfg.seed)
    rng = np.random.RandomState(cfg.seed)
    model = DiffuserTrafficModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for it in range(cfg.train_steps):
        loss = model.compute_losses(make_batch(cfg, rng))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"diffusion loss {loss.item():.4f}")
    model.eval()
    model.set_guidance(cfg.guidance)
    batch = make_batch(cfg, rng)
    samples = model.sample(batch)
    pos_w, _ = transform_agents_to_world(samples[..., :2], samples[..., 3:4], batch["world_from_agent"])
    print("final lateral offset to left lane:",
          (pos_w[..., -1, 1] - batch["lane_y"][:, None] - cfg.lane_width).abs().mean().item())


if __name__ == "__main__":
    main()
