# expect: freed_graph
# source: https://github.com/lucidrains/denoising-diffusion-pytorch/issues/109
"""Latent ODE on noisy spirals with a hand-written fixed-step RK4 solver.

Follows the structure of the torchdiffeq latent_ode example (recognition RNN
-> z0 -> ODE -> decoder), but integrates with plain backprop through an
explicit RK4 loop instead of the adjoint method.  The dynamics function is
conditioned on learnable Fourier features of time.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn

cfg = SimpleNamespace(
    seed=7,
    n_spirals=16,
    n_total=40,
    n_sample=12,
    noise_std=0.3,
    latent_dim=4,
    obs_dim=2,
    rnn_hidden=16,
    ode_hidden=24,
    time_feats=6,
    dec_hidden=16,
    lr=1e-2,
    iters=5,
    batch_size=8,
    log_every=1,
)


def generate_spirals(nspiral, ntotal, nsample, start=0.0, stop=1.0, noise_std=0.1, a=0.0, b=1.0):
    orig_ts = np.linspace(start, stop, num=ntotal)
    samp_ts = orig_ts[:nsample]
    zs_cw = stop + 1.0 - orig_ts
    rs_cw = a + b * 50.0 / zs_cw
    xs, ys = rs_cw * np.cos(zs_cw) - 5.0, rs_cw * np.sin(zs_cw)
    orig_traj_cw = np.stack((xs, ys), axis=1)
    zs_cc = orig_ts
    rw_cc = a + b * zs_cc
    xs, ys = rw_cc * np.cos(zs_cc) + 5.0, rw_cc * np.sin(zs_cc)
    orig_traj_cc = np.stack((xs, ys), axis=1)
    samp_trajs = []
    for _ in range(nspiral):
        t0_idx = np.random.randint(0, ntotal - nsample)
        cc = bool(np.random.rand() > 0.5)
        orig = orig_traj_cc if cc else orig_traj_cw
        samp = orig[t0_idx:t0_idx + nsample].copy()
        samp += np.random.randn(*samp.shape) * noise_std
        samp_trajs.append(samp)
    return np.stack(samp_trajs, 0) / 10.0, samp_ts


class FourierTime(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.freq = nn.Parameter(torch.randn(n_feats) * 2.0)
        self.phase = nn.Parameter(torch.zeros(n_feats))

    def forward(self, t):
        return torch.sin(t[:, None] * self.freq + self.phase)


class LatentODEfunc(nn.Module):
    def __init__(self, latent_dim, n_time, nhidden):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(latent_dim + n_time, nhidden), nn.ELU(),
            nn.Linear(nhidden, nhidden), nn.ELU(),
            nn.Linear(nhidden, latent_dim))
        self.nfe = 0

    def forward(self, tfeat, z):
        self.nfe += 1
        return self.net(torch.cat([z, tfeat.expand(z.size(0), -1)], dim=-1))


class RecognitionRNN(nn.Module):
    def __init__(self, latent_dim, obs_dim, nhidden):
        super().__init__()
        self.gru = nn.GRUCell(obs_dim, nhidden)
        self.h2o = nn.Linear(nhidden, 2 * latent_dim)
        self.nhidden = nhidden

    def forward(self, trajs):
        h = torch.zeros(trajs.size(0), self.nhidden)
        for t in reversed(range(trajs.size(1))):
            h = self.gru(trajs[:, t], h)
        return self.h2o(h)


class Decoder(nn.Module):
    def __init__(self, latent_dim, obs_dim, nhidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(latent_dim, nhidden), nn.ReLU(), nn.Linear(nhidden, obs_dim))

    def forward(self, z):
        return self.net(z)


def rk4_odeint(func, z0, grid_feats):
    """grid_feats holds time features at t0, t0+h/2, t0+h, ... (2N-1 rows)."""
    zs = [z0]
    z = z0
    n_steps = (grid_feats.size(0) - 1) // 2
    for i in range(n_steps):
        f0, fm, f1 = grid_feats[2 * i], grid_feats[2 * i + 1], grid_feats[2 * i + 2]
        h = 1.0 / n_steps
        k1 = func(f0, z)
        k2 = func(fm, z + 0.5 * h * k1)
        k3 = func(fm, z + 0.5 * h * k2)
        k4 = func(f1, z + h * k3)
        z = z + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        zs.append(z)
    return torch.stack(zs, dim=1)


def log_normal_pdf(x, mean, logvar):
    const = torch.log(torch.tensor(2.0 * np.pi))
    return -0.5 * (const + logvar + (x - mean) ** 2.0 / torch.exp(logvar))


def normal_kl(mu1, lv1, mu2, lv2):
    v1, v2 = torch.exp(lv1), torch.exp(lv2)
    return lv2 / 2.0 - lv1 / 2.0 + (v1 + (mu1 - mu2) ** 2.0) / (2.0 * v2) - 0.5


class RunningAverageMeter:
    def __init__(self, momentum=0.9):
        self.momentum, self.val, self.avg = momentum, None, 0

    def update(self, val):
        self.avg = val if self.val is None else self.avg * self.momentum + val * (1 - self.momentum)
        self.val = val


class LatentODETrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        trajs, ts = generate_spirals(cfg.n_spirals, cfg.n_total, cfg.n_sample, noise_std=cfg.noise_std)
        self.trajs = torch.from_numpy(trajs).float()
        self.ts = torch.from_numpy(ts).float()
        self.time_enc = FourierTime(cfg.time_feats)
        self.func = LatentODEfunc(cfg.latent_dim, cfg.time_feats, cfg.ode_hidden)
        self.rec = RecognitionRNN(cfg.latent_dim, cfg.obs_dim, cfg.rnn_hidden)
        self.dec = Decoder(cfg.latent_dim, cfg.obs_dim, cfg.dec_hidden)
        params = (list(self.func.parameters()) + list(self.rec.parameters())
                  + list(self.dec.parameters()) + list(self.time_enc.parameters()))
        self.optimizer = torch.optim.Adam(params, lr=cfg.lr)
        self.loss_meter = RunningAverageMeter()
        self.grid = self._solver_grid(self.ts)
        self.grid_feats = self.time_enc(self.grid)

    @staticmethod
    def _solver_grid(ts):
        mids = 0.5 * (ts[1:] + ts[:-1])
        grid = torch.empty(2 * ts.numel() - 1)
        grid[0::2], grid[1::2] = ts, mids
        return grid

    def elbo(self, batch):
        out = self.rec(batch)
        qz0_mean, qz0_logvar = out[:, :self.cfg.latent_dim], out[:, self.cfg.latent_dim:]
        z0 = qz0_mean + torch.randn_like(qz0_mean) * torch.exp(0.5 * qz0_logvar)
        pred_z = rk4_odeint(self.func, z0, self.grid_feats)
        pred_x = self.dec(pred_z)
        noise_logvar = torch.full_like(pred_x, 2.0 * np.log(self.cfg.noise_std / 10.0))
        logpx = log_normal_pdf(batch, pred_x, noise_logvar).sum(-1).sum(-1)
        zeros = torch.zeros_like(qz0_mean)
        kl = normal_kl(qz0_mean, qz0_logvar, zeros, zeros).sum(-1)
        return torch.mean(-logpx + kl)

    def train(self):
        for itr in range(1, self.cfg.iters + 1):
            idx = torch.randperm(self.trajs.size(0))[:self.cfg.batch_size]
            self.optimizer.zero_grad()
            self.func.nfe = 0
            loss = self.elbo(self.trajs[idx])
            loss.backward()  # raises
            self.optimizer.step()
            self.loss_meter.update(loss.item())
            if itr % self.cfg.log_every == 0:
                print(f"Iter: {itr}, running avg elbo: {-self.loss_meter.avg:.4f}, nfe: {self.func.nfe}")


if __name__ == "__main__":
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    LatentODETrainer(cfg).train()
