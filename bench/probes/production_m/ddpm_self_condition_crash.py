# expect: inference_tensor
# source: https://github.com/lucidrains/denoising-diffusion-pytorch/issues/286
"""Gaussian diffusion (DDPM) with self-conditioning, after
denoising_diffusion_pytorch: a small Unet with sinusoidal time embeddings and
ResNet blocks, GaussianDiffusion with a cosine schedule, pred_noise /
pred_x0 / pred_v objectives and a p_losses that half of the time feeds the
model its own x_start prediction, and a Trainer with gradient clipping, EMA
and a sampling pass.  Synthetic 8x8 single-channel "images".
"""
import copy
import math
import random as pyrandom
from collections import namedtuple
from functools import partial
from random import random

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
pyrandom.seed(0)

ModelPrediction = namedtuple("ModelPrediction", ["pred_noise", "pred_x_start"])


def exists(x):
    return x is not None


def default(val, d):
    if exists(val):
        return val
    return d() if callable(d) else d


def identity(t, *args, **kwargs):
    return t


def extract(a, t, x_shape):
    b, *_ = t.shape
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


def cosine_beta_schedule(timesteps, s=0.008):
    steps = timesteps + 1
    t = torch.linspace(0, timesteps, steps, dtype=torch.float64) / timesteps
    alphas_cumprod = torch.cos((t + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return torch.clip(betas, 0, 0.999)


# ------------------------------------------------------------------ unet
class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half_dim = self.dim // 2
        emb = math.log(10000) / (half_dim - 1)
        emb = torch.exp(torch.arange(half_dim) * -emb)
        emb = x[:, None] * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class ResnetBlock(nn.Module):
    def __init__(self, dim, dim_out, time_emb_dim, groups=4):
        super().__init__()
        self.mlp = nn.Sequential(nn.SiLU(), nn.Linear(time_emb_dim, dim_out * 2))
        self.block1 = nn.Sequential(nn.Conv2d(dim, dim_out, 3, padding=1), nn.GroupNorm(groups, dim_out), nn.SiLU())
        self.block2 = nn.Sequential(nn.Conv2d(dim_out, dim_out, 3, padding=1), nn.GroupNorm(groups, dim_out), nn.SiLU())
        self.res_conv = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()

    def forward(self, x, time_emb):
        scale, shift = self.mlp(time_emb)[:, :, None, None].chunk(2, dim=1)
        h = self.block1(x) * (scale + 1) + shift
        return self.block2(h) + self.res_conv(x)


class Unet(nn.Module):
    def __init__(self, dim=8, channels=1, self_condition=False):
        super().__init__()
        self.channels = channels
        self.self_condition = self_condition
        self.out_dim = channels
        time_dim = dim * 4
        # the self-conditioning estimate gets its own 1x1 projection before it joins the noisy input
        self.self_cond_proj = nn.Conv2d(channels, channels, 1) if self_condition else None
        input_channels = channels * (2 if self_condition else 1)
        self.init_conv = nn.Conv2d(input_channels, dim, 7, padding=3)
        self.time_mlp = nn.Sequential(SinusoidalPosEmb(dim), nn.Linear(dim, time_dim), nn.GELU(), nn.Linear(time_dim, time_dim))
        self.down = ResnetBlock(dim, dim * 2, time_dim)
        self.downsample = nn.Conv2d(dim * 2, dim * 2, 4, stride=2, padding=1)
        self.mid = ResnetBlock(dim * 2, dim * 2, time_dim)
        self.upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(dim * 2, dim * 2, 3, padding=1))
        self.up = ResnetBlock(dim * 4, dim, time_dim)
        self.final_res_block = ResnetBlock(dim * 2, dim, time_dim)
        self.final_conv = nn.Conv2d(dim, self.out_dim, 1)

    def forward(self, x, time, x_self_cond=None):
        if self.self_condition:
            x_self_cond = default(x_self_cond, lambda: torch.zeros_like(x))
            x = torch.cat((self.self_cond_proj(x_self_cond), x), dim=1)  # raises
        x = self.init_conv(x)
        r = x.clone()
        t = self.time_mlp(time)
        h = self.down(x, t)
        x = self.mid(self.downsample(h), t)
        x = self.up(torch.cat((self.upsample(x), h), dim=1), t)
        x = torch.cat((x, r), dim=1)
        x = self.final_res_block(x, t)
        return self.final_conv(x)


# ------------------------------------------------------------------ gaussian diffusion
class GaussianDiffusion(nn.Module):
    def __init__(self, model, *, image_size, timesteps=100, objective="pred_v"):
        super().__init__()
        self.model = model
        self.channels = model.channels
        self.self_condition = model.self_condition
        self.image_size = image_size
        self.objective = objective
        betas = cosine_beta_schedule(timesteps)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.num_timesteps = int(betas.shape[0])
        register_buffer = lambda name, val: self.register_buffer(name, val.to(torch.float32))
        register_buffer("sqrt_alphas_cumprod", torch.sqrt(alphas_cumprod))
        register_buffer("sqrt_one_minus_alphas_cumprod", torch.sqrt(1.0 - alphas_cumprod))
        register_buffer("sqrt_recip_alphas_cumprod", torch.sqrt(1.0 / alphas_cumprod))
        register_buffer("sqrt_recipm1_alphas_cumprod", torch.sqrt(1.0 / alphas_cumprod - 1))
        snr = alphas_cumprod / (1 - alphas_cumprod)
        register_buffer("loss_weight", snr / (snr + 1) if objective == "pred_v" else torch.ones_like(snr))

    def predict_start_from_noise(self, x_t, t, noise):
        return extract(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t - extract(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape) * noise

    def predict_noise_from_start(self, x_t, t, x0):
        return (extract(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t - x0) / extract(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape)

    def predict_v(self, x_start, t, noise):
        return extract(self.sqrt_alphas_cumprod, t, x_start.shape) * noise - extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * x_start

    def predict_start_from_v(self, x_t, t, v):
        return extract(self.sqrt_alphas_cumprod, t, x_t.shape) * x_t - extract(self.sqrt_one_minus_alphas_cumprod, t, x_t.shape) * v

    def model_predictions(self, x, t, x_self_cond=None, clip_x_start=False):
        model_output = self.model(x, t, x_self_cond)
        maybe_clip = partial(torch.clamp, min=-1.0, max=1.0) if clip_x_start else identity
        if self.objective == "pred_noise":
            pred_noise = model_output
            x_start = maybe_clip(self.predict_start_from_noise(x, t, pred_noise))
        elif self.objective == "pred_x0":
            x_start = maybe_clip(model_output)
            pred_noise = self.predict_noise_from_start(x, t, x_start)
        else:
            x_start = maybe_clip(self.predict_start_from_v(x, t, model_output))
            pred_noise = self.predict_noise_from_start(x, t, x_start)
        return ModelPrediction(pred_noise, x_start)

    @torch.inference_mode()
    def ddim_sample(self, batch_size, sampling_steps=5):
        img = torch.randn(batch_size, self.channels, self.image_size, self.image_size)
        times = torch.linspace(-1, self.num_timesteps - 1, steps=sampling_steps + 1).int().tolist()[::-1]
        x_start = None
        for time, time_next in zip(times[:-1], times[1:]):
            t = torch.full((batch_size,), time, dtype=torch.long)
            self_cond = x_start if self.self_condition else None
            pred_noise, x_start = self.model_predictions(img, t, self_cond, clip_x_start=True)
            if time_next < 0:
                img = x_start
                continue
            alpha_next = self.sqrt_alphas_cumprod[time_next] ** 2
            img = x_start * alpha_next.sqrt() + (1 - alpha_next).sqrt() * pred_noise
        return (img + 1) * 0.5

    def q_sample(self, x_start, t, noise):
        return extract(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start + extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise

    def p_losses(self, x_start, t, noise=None):
        noise = default(noise, lambda: torch.randn_like(x_start))
        x = self.q_sample(x_start=x_start, t=t, noise=noise)

        # if doing self-conditioning, 50% of the time, predict x_start from current set of times
        # and condition with unet with that
        x_self_cond = None
        if self.self_condition and random() < 0.5:
            with torch.inference_mode():
                x_self_cond = self.model_predictions(x, t).pred_x_start
                x_self_cond.detach_()

        # predict and take gradient step
        model_out = self.model(x, t, x_self_cond)
        target = {"pred_noise": noise, "pred_x0": x_start, "pred_v": self.predict_v(x_start, t, noise)}[self.objective]
        loss = F.mse_loss(model_out, target, reduction="none").mean(dim=(1, 2, 3))
        loss = loss * extract(self.loss_weight, t, loss.shape)
        return loss.mean()

    def forward(self, img):
        b = img.shape[0]
        t = torch.randint(0, self.num_timesteps, (b,)).long()
        return self.p_losses(img * 2 - 1, t)


# ------------------------------------------------------------------ trainer
class Trainer:
    def __init__(self, diffusion_model, train_num_steps=8, train_batch_size=8, train_lr=1e-3, ema_decay=0.995, max_grad_norm=1.0):
        self.model = diffusion_model
        self.ema_model = copy.deepcopy(diffusion_model)
        self.opt = torch.optim.Adam(diffusion_model.parameters(), lr=train_lr, betas=(0.9, 0.99))
        self.train_num_steps, self.batch_size = train_num_steps, train_batch_size
        self.ema_decay, self.max_grad_norm = ema_decay, max_grad_norm
        self.step = 0

    def next_batch(self):
        base = torch.linspace(0, 1, self.model.image_size)
        imgs = (base[None, :] * base[:, None])[None, None].repeat(self.batch_size, 1, 1, 1)
        return (imgs + 0.1 * torch.rand_like(imgs)).clamp(0, 1)

    @torch.no_grad()
    def ema_update(self):
        for p_ema, p in zip(self.ema_model.parameters(), self.model.parameters()):
            p_ema.lerp_(p, 1 - self.ema_decay)

    def train(self):
        while self.step < self.train_num_steps:
            loss = self.model(self.next_batch())
            self.opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            self.opt.step()
            self.ema_update()
            self.step += 1
            print(f"step {self.step}  loss: {loss.item():.4f}")
        samples = self.ema_model.ddim_sample(batch_size=4)
        print("sample range", round(samples.min().item(), 3), round(samples.max().item(), 3))


if __name__ == "__main__":
    model = Unet(dim=8, channels=1, self_condition=True)
    diffusion = GaussianDiffusion(model, image_size=8, timesteps=100, objective="pred_v")
    Trainer(diffusion, train_num_steps=8, train_batch_size=8).train()
