# expect: freed_graph
# source: https://github.com/pytorch/xla/issues/1961
"""World Models (Ha & Schmidhuber, 2018) on a toy point-mass environment.

V: a small convolutional VAE compresses 16x16 observations into z.
M: an MDN-RNN models p(z_{t+1} | z_t, a_t, h_t).
C: a linear controller maps [z_t, h_t] to actions; here it is fitted by
   behaviour cloning of a scripted expert instead of CMA-ES.
The three parts are trained jointly on freshly collected rollouts; the
MDN-RNN is switched on after a short VAE warm-up.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class VAEConfig:
    img: int = 16
    z_dim: int = 8
    beta: float = 0.5
    lr: float = 1e-3


@dataclass
class MDNConfig:
    hidden: int = 32
    n_gauss: int = 3
    lr: float = 1e-3


@dataclass
class WorldModelConfig:
    seed: int = 3
    rollouts: int = 4
    seq_len: int = 6
    action_dim: int = 2
    steps: int = 5
    mdn_start: int = 2
    ctrl_lr: float = 3e-3
    vae: VAEConfig = field(default_factory=VAEConfig)
    mdn: MDNConfig = field(default_factory=MDNConfig)


class PointMassEnv:
    """A blob drifting on a 16x16 canvas, pushed by 2-D actions."""

    def __init__(self, size, batch):
        self.size, self.batch = size, batch
        ys, xs = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
        self.grid = torch.stack([ys, xs], 0)

    def reset(self):
        self.pos = torch.rand(self.batch, 2) * (self.size - 1)
        return self.render()

    def render(self):
        d2 = ((self.grid[None] - self.pos[:, :, None, None]) ** 2).sum(1)
        return torch.exp(-d2 / 4.0)[:, None]

    def expert_action(self):
        centre = torch.full_like(self.pos, (self.size - 1) / 2)
        return torch.tanh((centre - self.pos) / 4.0)

    def step(self, action):
        self.pos = (self.pos + 1.5 * action + 0.2 * torch.randn_like(self.pos)).clamp(0, self.size - 1)
        return self.render()


def collect_rollouts(env, seq_len):
    obs, acts = [env.reset()], []
    for _ in range(seq_len):
        a = env.expert_action()
        acts.append(a)
        obs.append(env.step(a))
    return torch.stack(obs[:-1], 1), torch.stack(acts, 1)


class ConvVAE(nn.Module):
    def __init__(self, cfg: VAEConfig):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 8, 4, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 4, 2, 1), nn.ReLU(), nn.Flatten())
        self.mu = nn.Linear(16 * 4 * 4, cfg.z_dim)
        self.logvar = nn.Linear(16 * 4 * 4, cfg.z_dim)
        self.dec_fc = nn.Linear(cfg.z_dim, 16 * 4 * 4)
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(16, 8, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(8, 1, 4, 2, 1), nn.Sigmoid())

    def encode(self, x):
        h = self.enc(x)
        return self.mu(h), self.logvar(h)

    def reparameterize(self, mu, logvar):
        return mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)

    def decode(self, z):
        return self.dec(self.dec_fc(z).view(-1, 16, 4, 4))

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar, z


class MDNRNN(nn.Module):
    def __init__(self, z_dim, action_dim, cfg: MDNConfig):
        super().__init__()
        self.z_dim, self.k = z_dim, cfg.n_gauss
        self.rnn = nn.LSTM(z_dim + action_dim, cfg.hidden, batch_first=True)
        self.head = nn.Linear(cfg.hidden, self.k * (2 * z_dim + 1))

    def forward(self, z, a):
        h, _ = self.rnn(torch.cat([z, a], -1))
        out = self.head(h)
        B, T = z.shape[:2]
        logpi = F.log_softmax(out[..., :self.k], -1)
        mu = out[..., self.k:self.k + self.k * self.z_dim].view(B, T, self.k, self.z_dim)
        logsig = out[..., self.k + self.k * self.z_dim:].view(B, T, self.k, self.z_dim).clamp(-4, 2)
        return logpi, mu, logsig, h

    def nll(self, logpi, mu, logsig, target):
        t = target.unsqueeze(-2)
        log_prob = -0.5 * (((t - mu) / logsig.exp()) ** 2 + 2 * logsig + math.log(2 * math.pi)).sum(-1)
        return -torch.logsumexp(logpi + log_prob, dim=-1).mean()


class Controller(nn.Module):
    def __init__(self, z_dim, hidden, action_dim):
        super().__init__()
        self.fc = nn.Linear(z_dim + hidden, action_dim)

    def forward(self, z, h):
        return torch.tanh(self.fc(torch.cat([z, h], -1)))


class WorldModelTrainer:
    def __init__(self, cfg: WorldModelConfig):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.env = PointMassEnv(cfg.vae.img, cfg.rollouts)
        self.vae = ConvVAE(cfg.vae)
        self.mdn = MDNRNN(cfg.vae.z_dim, cfg.action_dim, cfg.mdn)
        self.ctrl = Controller(cfg.vae.z_dim, cfg.mdn.hidden, cfg.action_dim)
        self.vae_opt = torch.optim.Adam(self.vae.parameters(), lr=cfg.vae.lr)
        self.mdn_opt = torch.optim.Adam(self.mdn.parameters(), lr=cfg.mdn.lr)
        self.ctrl_opt = torch.optim.Adam(self.ctrl.parameters(), lr=cfg.ctrl_lr)
        self.logs = []

    def vae_step(self, obs):
        B, T = obs.shape[:2]
        recon, mu, logvar, z = self.vae(obs.flatten(0, 1))
        rec = F.binary_cross_entropy(recon, obs.flatten(0, 1), reduction="sum") / (B * T)
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / (B * T)
        loss = rec + self.cfg.vae.beta * kld
        self.vae_opt.zero_grad()
        loss.backward()
        self.vae_opt.step()
        return z.view(B, T, -1), loss.item()

    def mdn_step(self, z, actions):
        logpi, mu, logsig, h = self.mdn(z[:, :-1], actions[:, :-1])
        loss = self.mdn.nll(logpi, mu, logsig, z[:, 1:])
        self.mdn_opt.zero_grad()
        loss.backward()  # raises
        self.mdn_opt.step()
        return h.detach(), loss.item()

    def ctrl_step(self, z, h, actions):
        pred = self.ctrl(z[:, :-1].detach(), h)
        loss = F.mse_loss(pred, actions[:, :-1])
        self.ctrl_opt.zero_grad()
        loss.backward()
        self.ctrl_opt.step()
        return loss.item()

    def train(self):
        for step in range(self.cfg.steps):
            obs, actions = collect_rollouts(self.env, self.cfg.seq_len)
            z, vae_loss = self.vae_step(obs)
            record = {"step": step, "vae": vae_loss}
            if step >= self.cfg.mdn_start:
                h, record["mdn"] = self.mdn_step(z, actions)
                record["ctrl"] = self.ctrl_step(z, h, actions)
            self.logs.append(record)
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))


if __name__ == "__main__":
    WorldModelTrainer(WorldModelConfig()).train()
