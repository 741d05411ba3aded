# expect: clean
# source: https://github.com/suxuann/ddib/issues/3
"""
Train a small diffusion model on 2D synthetic data (guided-diffusion style).

Mirrors the layout of scripts/synthetic_train.py + train_util.TrainLoop:
a Gaussian diffusion process, an MLP epsilon-predictor, and a training loop
that keeps one EMA copy of the parameters per rate in --ema_rate.
"""
import argparse
import copy
import logging
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger("synthetic_train")


# ----------------------------------------------------------------------------
# nn helpers
# ----------------------------------------------------------------------------
def timestep_embedding(timesteps, dim, max_period=10000):
    """Create sinusoidal timestep embeddings."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half
    )
    args = timesteps[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


def update_ema(target_params, source_params, rate=0.99):
    """
    Update target parameters to be closer to those of source parameters using
    an exponential moving average.
    """
    for targ, src in zip(target_params, source_params):
        targ.detach().mul_(rate).add_(src, alpha=1 - rate)


def mean_flat(tensor):
    return tensor.mean(dim=list(range(1, len(tensor.shape))))


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ResBlock(nn.Module):
    def __init__(self, channels, emb_channels, dropout):
        super().__init__()
        self.in_layers = nn.Sequential(nn.LayerNorm(channels), nn.SiLU(), nn.Linear(channels, channels))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, channels))
        self.out_layers = nn.Sequential(
            nn.LayerNorm(channels), nn.SiLU(), nn.Dropout(dropout), nn.Linear(channels, channels)
        )

    def forward(self, x, emb):
        h = self.in_layers(x)
        h = h + self.emb_layers(emb)
        return x + self.out_layers(h)


class SyntheticMLP(nn.Module):
    def __init__(self, in_channels=2, num_channels=64, num_res_blocks=3, dropout=0.0):
        super().__init__()
        self.num_channels = num_channels
        time_dim = num_channels * 2
        self.time_embed = nn.Sequential(
            nn.Linear(num_channels, time_dim), nn.SiLU(), nn.Linear(time_dim, time_dim)
        )
        self.input_proj = nn.Linear(in_channels, num_channels)
        self.blocks = nn.ModuleList(
            [ResBlock(num_channels, time_dim, dropout) for _ in range(num_res_blocks)]
        )
        self.out = nn.Sequential(nn.LayerNorm(num_channels), nn.SiLU(), nn.Linear(num_channels, in_channels))

    def forward(self, x, timesteps):
        emb = self.time_embed(timestep_embedding(timesteps, self.num_channels))
        h = self.input_proj(x)
        for block in self.blocks:
            h = block(h, emb)
        return self.out(h)


# ----------------------------------------------------------------------------
# diffusion
# ----------------------------------------------------------------------------
def get_named_beta_schedule(name, num_diffusion_timesteps):
    if name == "linear":
        scale = 1000 / num_diffusion_timesteps
        return np.linspace(scale * 0.0001, scale * 0.02, num_diffusion_timesteps, dtype=np.float64)
    raise NotImplementedError(f"unknown beta schedule: {name}")


class GaussianDiffusion:
    def __init__(self, betas):
        self.betas = betas
        self.num_timesteps = int(betas.shape[0])
        alphas = 1.0 - betas
        self.alphas_cumprod = np.cumprod(alphas, axis=0)
        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)

    @staticmethod
    def _extract(arr, timesteps, broadcast_shape):
        res = torch.from_numpy(arr)[timesteps].float()
        while len(res.shape) < len(broadcast_shape):
            res = res[..., None]
        return res.expand(broadcast_shape)

    def q_sample(self, x_start, t, noise):
        return (
            self._extract(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
            + self._extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise
        )

    def training_losses(self, model, x_start, t):
        noise = torch.randn_like(x_start)
        x_t = self.q_sample(x_start, t, noise)
        model_output = model(x_t, t)
        return {"loss": mean_flat((noise - model_output) ** 2)}


# ----------------------------------------------------------------------------
# training loop
# ----------------------------------------------------------------------------
class TrainLoop:
    def __init__(self, *, model, diffusion, data, batch_size, lr, ema_rate, weight_decay, lr_anneal_steps):
        self.model = model
        self.diffusion = diffusion
        self.data = data
        self.batch_size = batch_size
        self.lr = lr
        self.ema_rate = [float(x) for x in ema_rate.split(",")] if isinstance(ema_rate, str) else [ema_rate]
        self.lr_anneal_steps = lr_anneal_steps
        self.step = 0

        self.model_params = list(self.model.parameters())
        self.opt = torch.optim.AdamW(self.model_params, lr=self.lr, weight_decay=weight_decay)
        # one copy of the parameters per EMA rate
        self.ema_params = [copy.deepcopy(self.model_params) for _ in range(len(self.ema_rate))]

    def run_loop(self):
        while not self.lr_anneal_steps or self.step < self.lr_anneal_steps:
            batch = next(self.data)
            self.run_step(batch)
            if self.step % 2 == 0:
                logger.info("step %d", self.step)
            self.step += 1

    def run_step(self, batch):
        self.forward_backward(batch)
        self.opt.step()
        self._update_ema()
        self._anneal_lr()

    def forward_backward(self, batch):
        self.opt.zero_grad()
        t = torch.randint(0, self.diffusion.num_timesteps, (batch.shape[0],))
        losses = self.diffusion.training_losses(self.model, batch, t)
        loss = losses["loss"].mean()
        loss.backward()
        logger.debug("loss %.4f", loss.item())

    def _update_ema(self):
        for rate, params in zip(self.ema_rate, self.ema_params):
            update_ema(params, self.model_params, rate=rate)

    def _anneal_lr(self):
        if not self.lr_anneal_steps:
            return
        frac_done = self.step / self.lr_anneal_steps
        lr = self.lr * (1 - frac_done)
        for param_group in self.opt.param_groups:
            param_group["lr"] = lr


def load_2d_data(batch_size, task=1):
    """Infinite generator over a two-moons-like point cloud."""
    while True:
        theta = torch.rand(batch_size) * math.pi
        sign = torch.randint(0, 2, (batch_size,)).float() * 2 - 1
        x = torch.stack([torch.cos(theta) * sign + (1 - sign) * 0.5, torch.sin(theta) * sign], dim=1)
        yield x * task + 0.05 * torch.randn_like(x)


def create_argparser():
    defaults = dict(
        task=1, lr=1e-4, weight_decay=0.0, lr_anneal_steps=6, batch_size=64,
        ema_rate="0.9999", num_channels=64, num_res_blocks=3, dropout=0.2,
        diffusion_steps=100, noise_schedule="linear",
    )
    parser = argparse.ArgumentParser()
    for k, v in defaults.items():
        parser.add_argument(f"--{k}", default=v, type=type(v))
    return parser


def main():
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = create_argparser().parse_args([])
    torch.manual_seed(0)
    logger.info("creating 2d model and diffusion...")
    model = SyntheticMLP(num_channels=args.num_channels, num_res_blocks=args.num_res_blocks, dropout=args.dropout)
    diffusion = GaussianDiffusion(get_named_beta_schedule(args.noise_schedule, args.diffusion_steps))
    logger.info("creating 2d data loader...")
    data = load_2d_data(args.batch_size, task=args.task)
    logger.info("training 2d model...")
    TrainLoop(
        model=model, diffusion=diffusion, data=data, batch_size=args.batch_size, lr=args.lr,
        ema_rate=args.ema_rate, weight_decay=args.weight_decay, lr_anneal_steps=args.lr_anneal_steps,
    ).run_loop()
    logger.info("done")


if __name__ == "__main__":
    main()
