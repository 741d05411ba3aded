# expect: numpy_requires_grad
# source: https://github.com/WEIRDLabUW/unified-world-model/pull/8
"""Latent world model with a VAE image tokenizer, trained on (observation,
action, next observation) transitions; evaluation rolls the dynamics forward,
decodes the predicted latents and renders a comparison strip (as a numpy image
with simple statistics instead of a matplotlib figure).

Structure follows a typical world-model workspace: config dict, VAE encoder /
decoder, latent dynamics MLP, a Workspace class with train_step / evaluate /
decode_and_plot, an EMA copy of the dynamics and checkpoint-free synthetic data.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "model": {"image_size": 16, "channels": 3, "latent_dim": 16, "action_dim": 4, "hidden": 64},
    "train": {"batch_size": 8, "steps": 6, "eval_every": 3, "lr": 3e-4, "kl_weight": 1e-3,
              "ema_decay": 0.95, "rollout_horizon": 3},
    "seed": 0,
}


class VAEEncoder(nn.Module):
    def __init__(self, c, latent_dim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c, 16, 4, 2, 1), nn.SiLU(), nn.Conv2d(16, 32, 4, 2, 1), nn.SiLU(),
                                  nn.Flatten())
        self.mean = nn.LazyLinear(latent_dim)
        self.logvar = nn.LazyLinear(latent_dim)

    def forward(self, x):
        h = self.conv(x)
        return self.mean(h), self.logvar(h).clamp(-6, 4)


class VAEDecoder(nn.Module):
    def __init__(self, c, latent_dim, size):
        super().__init__()
        self.size = size
        self.fc = nn.Linear(latent_dim, 32 * (size // 4) ** 2)
        self.deconv = nn.Sequential(nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.SiLU(),
                                    nn.ConvTranspose2d(16, c, 4, 2, 1), nn.Sigmoid())

    def forward(self, z):
        h = self.fc(z).view(z.size(0), 32, self.size // 4, self.size // 4)
        return self.deconv(h)


class LatentDynamics(nn.Module):
    def __init__(self, latent_dim, action_dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(latent_dim + action_dim, hidden), nn.SiLU(),
                                 nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, latent_dim))

    def forward(self, z, a):
        return z + self.net(torch.cat([z, a], dim=-1))


class WorldModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        m = cfg["model"]
        self.encoder = VAEEncoder(m["channels"], m["latent_dim"])
        self.decoder = VAEDecoder(m["channels"], m["latent_dim"], m["image_size"])
        self.dynamics = LatentDynamics(m["latent_dim"], m["action_dim"], m["hidden"])

    def encode(self, obs, sample=True):
        mean, logvar = self.encoder(obs)
        z = mean + torch.randn_like(mean) * (0.5 * logvar).exp() if sample else mean
        return z, mean, logvar

    def loss(self, obs, action, next_obs, kl_weight):
        z, mean, logvar = self.encode(obs)
        recon = F.mse_loss(self.decoder(z), obs)
        kl = -0.5 * torch.mean(1 + logvar - mean.pow(2) - logvar.exp())
        with torch.no_grad():
            z_next_target, _, _ = self.encode(next_obs, sample=False)
        dyn = F.mse_loss(self.dynamics(z, action), z_next_target)
        return recon + kl_weight * kl + dyn, {"recon": recon.item(), "kl": kl.item(), "dyn": dyn.item()}


def synthetic_transitions(cfg, gen):
    m, t = cfg["model"], cfg["train"]
    obs = torch.rand(t["batch_size"], m["channels"], m["image_size"], m["image_size"], generator=gen)
    action = torch.randn(t["batch_size"], m["action_dim"], generator=gen)
    next_obs = torch.roll(obs, shifts=1, dims=-1) * 0.9 + 0.05
    return obs, action, next_obs


def to_uint8_strip(images):
    """(N, C, H, W) in [0, 1] -> (H, N*W, C) uint8 image strip."""
    arr = np.asarray(images)  # raises
    arr = np.concatenate(list(arr), axis=-1)
    return (np.transpose(arr, (1, 2, 0)) * 255).astype(np.uint8)


class Workspace:
    def __init__(self, cfg):
        self.cfg = cfg
        torch.manual_seed(cfg["seed"])
        self.model = WorldModel(cfg)
        self.gen = torch.Generator().manual_seed(cfg["seed"])
        self.model.loss(*synthetic_transitions(cfg, self.gen), cfg["train"]["kl_weight"])  # init lazy layers
        self.ema_dynamics = copy.deepcopy(self.model.dynamics).requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg["train"]["lr"], weight_decay=1e-4)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=cfg["train"]["steps"])
        self.step = 0
        self.logs = []

    @torch.no_grad()
    def update_ema(self):
        d = self.cfg["train"]["ema_decay"]
        for p_ema, p in zip(self.ema_dynamics.parameters(), self.model.dynamics.parameters()):
            p_ema.mul_(d).add_(p, alpha=1 - d)

    def train_step(self):
        self.model.train()
        obs, action, next_obs = synthetic_transitions(self.cfg, self.gen)
        loss, info = self.model.loss(obs, action, next_obs, self.cfg["train"]["kl_weight"])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.update_ema()
        self.step += 1
        self.logs.append(info)
        return info

    def decode_and_plot(self, obs, actions):
        z, _, _ = self.model.encode(obs, sample=False)
        frames = [self.model.decoder(z)]
        for a in actions:
            z = self.ema_dynamics(z, a)
            frames.append(self.model.decoder(z))
        strips = [to_uint8_strip(f[:2]) for f in frames]
        return np.concatenate(strips, axis=0)

    def evaluate(self):
        self.model.eval()
        obs, action, next_obs = synthetic_transitions(self.cfg, self.gen)
        horizon = self.cfg["train"]["rollout_horizon"]
        canvas = self.decode_and_plot(obs, [action] * horizon)
        with torch.no_grad():
            val_loss, _ = self.model.loss(obs, action, next_obs, self.cfg["train"]["kl_weight"])
        print(f"[eval] step {self.step} loss {val_loss.item():.4f} canvas {canvas.shape} mean {canvas.mean():.1f}")

    def run(self):
        for _ in range(self.cfg["train"]["steps"]):
            info = self.train_step()
            if self.step % self.cfg["train"]["eval_every"] == 0:
                print(f"step {self.step} " + " ".join(f"{k} {v:.4f}" for k, v in info.items()))
                self.evaluate()


def main():
    Workspace(CONFIG).run()


if __name__ == "__main__":
    main()
