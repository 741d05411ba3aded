# expect: clean
# source: https://github.com/huggingface/diffusers/issues/1658
"""DreamBooth-style subject fine-tuning of a small text-conditioned denoiser.

The text encoder is frozen; the UNet is fine-tuned on a handful of "instance"
images with the instance prompt, with an EMA copy of its weights.  Every
`save_every` steps the trainer writes a half-precision checkpoint and renders a
preview sample, then continues training.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DreamBoothConfig:
    instance_prompt: str = "a photo of sks dog"
    sample_prompts: list = field(default_factory=lambda: ["a photo of sks dog on the beach"])
    resolution: int = 8
    channels: int = 3
    train_batch_size: int = 2
    gradient_accumulation_steps: int = 2
    max_train_steps: int = 8
    save_every: int = 3
    save_precision: torch.dtype = torch.bfloat16
    learning_rate: float = 5e-4
    use_ema: bool = True
    ema_decay: float = 0.99
    num_train_timesteps: int = 100
    num_inference_steps: int = 5
    seed: int = 1234


class Tokenizer:
    def __init__(self, vocab_size=64, max_len=8):
        self.vocab_size, self.max_len = vocab_size, max_len

    def __call__(self, text):
        ids = [sum(map(ord, w)) % (self.vocab_size - 1) + 1 for w in text.split()][: self.max_len]
        return torch.tensor(ids + [0] * (self.max_len - len(ids)))[None]


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=64, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, ids):
        return self.layer(self.embed(ids))


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class CrossAttnResBlock(nn.Module):
    def __init__(self, ch, temb_dim, ctx_dim):
        super().__init__()
        self.norm1 = nn.GroupNorm(4, ch)
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.temb_proj = nn.Linear(temb_dim, ch)
        self.norm2 = nn.GroupNorm(4, ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1)
        self.attn = nn.MultiheadAttention(ch, 2, kdim=ctx_dim, vdim=ctx_dim, batch_first=True)

    def forward(self, x, temb, ctx):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb_proj(F.silu(temb))[:, :, None, None]
        h = x + self.conv2(F.silu(self.norm2(h)))
        b, c, hh, ww = h.shape
        q = h.flatten(2).transpose(1, 2)
        a, _ = self.attn(q, ctx, ctx, need_weights=False)
        return h + a.transpose(1, 2).reshape(b, c, hh, ww)


class UNet2DConditionModel(nn.Module):
    def __init__(self, in_ch=3, ch=16, ctx_dim=16):
        super().__init__()
        self.time_embedding = nn.Sequential(nn.Linear(ch, 4 * ch), nn.SiLU(), nn.Linear(4 * ch, 4 * ch))
        self.conv_in = nn.Conv2d(in_ch, ch, 3, padding=1)
        self.down = CrossAttnResBlock(ch, 4 * ch, ctx_dim)
        self.downsample = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mid = CrossAttnResBlock(ch, 4 * ch, ctx_dim)
        self.up = CrossAttnResBlock(2 * ch, 4 * ch, ctx_dim)
        self.conv_out = nn.Conv2d(2 * ch, in_ch, 3, padding=1)
        self.ch = ch

    def forward(self, sample, timesteps, encoder_hidden_states):
        temb = self.time_embedding(timestep_embedding(timesteps, self.ch))
        h0 = self.down(self.conv_in(sample), temb, encoder_hidden_states)
        h = self.mid(self.downsample(h0), temb, encoder_hidden_states)
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        h = self.up(torch.cat([h, h0], 1), temb, encoder_hidden_states)
        return self.conv_out(h)


class DDPMScheduler:
    def __init__(self, num_train_timesteps=100):
        self.num_train_timesteps = num_train_timesteps
        betas = torch.linspace(1e-4, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - betas, 0)

    def add_noise(self, x0, noise, t):
        a = self.alphas_cumprod[t].sqrt()[:, None, None, None]
        s = (1 - self.alphas_cumprod[t]).sqrt()[:, None, None, None]
        return a * x0 + s * noise

    def ddim_sample(self, unet, ctx, shape, steps, g):
        x = torch.randn(shape, generator=g)
        ts = torch.linspace(self.num_train_timesteps - 1, 0, steps).long()
        for i, t in enumerate(ts):
            eps = unet(x, t.repeat(shape[0]), ctx)
            a_t = self.alphas_cumprod[t]
            a_prev = self.alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.tensor(1.0)
            x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
        return x


class EMAModel:
    def __init__(self, parameters, decay):
        self.decay = decay
        self.shadow_params = [p.detach().clone() for p in parameters]

    @torch.no_grad()
    def step(self, parameters):
        for s, p in zip(self.shadow_params, parameters):
            s.sub_((1 - self.decay) * (s - p))


class DreamBoothTrainer:
    def __init__(self, cfg, instance_images):
        self.cfg = cfg
        self.tokenizer = Tokenizer()
        self.text_encoder = TextEncoder().requires_grad_(False).eval()
        self.unet = UNet2DConditionModel(cfg.channels)
        self.scheduler = DDPMScheduler(cfg.num_train_timesteps)
        self.optimizer = torch.optim.AdamW(self.unet.parameters(), lr=cfg.learning_rate)
        self.ema_unet = EMAModel(self.unet.parameters(), cfg.ema_decay) if cfg.use_ema else None
        self.instance_images = instance_images
        self.checkpoints, self.previews = {}, {}
        self.g = torch.Generator().manual_seed(cfg.seed)

    def encode_prompt(self, prompt, batch_size):
        with torch.no_grad():
            ctx = self.text_encoder(self.tokenizer(prompt))
        return ctx.expand(batch_size, -1, -1)

    def training_step(self, batch):
        noise = torch.randn(batch.shape, generator=self.g)
        timesteps = torch.randint(0, self.cfg.num_train_timesteps, (batch.shape[0],), generator=self.g)
        noisy_latents = self.scheduler.add_noise(batch, noise, timesteps)
        encoder_hidden_states = self.encode_prompt(self.cfg.instance_prompt, batch.shape[0])
        noise_pred = self.unet(noisy_latents, timesteps, encoder_hidden_states)
        loss = F.mse_loss(noise_pred, noise) / self.cfg.gradient_accumulation_steps
        loss.backward()
        return loss.item()

    @torch.no_grad()
    def save_weights(self, step):
        """Write a half-precision checkpoint and render preview samples."""
        self.unet.eval()
        self.unet.to(dtype=self.cfg.save_precision)
        self.checkpoints[step] = {k: v.clone() for k, v in self.unet.state_dict().items()}
        self.unet.to(dtype=torch.float32)
        for prompt in self.cfg.sample_prompts:
            ctx = self.encode_prompt(prompt, 1)
            shape = (1, self.cfg.channels, self.cfg.resolution, self.cfg.resolution)
            img = self.scheduler.ddim_sample(self.unet, ctx, shape, self.cfg.num_inference_steps, self.g)
            self.previews[(step, prompt)] = float(img.std())
        self.unet.train()

    def train(self):
        step, micro = 0, 0
        n = self.instance_images.shape[0]
        self.unet.train()
        while step < self.cfg.max_train_steps:
            idx = torch.randint(0, n, (self.cfg.train_batch_size,), generator=self.g)
            loss = self.training_step(self.instance_images[idx])
            micro += 1
            if micro % self.cfg.gradient_accumulation_steps:
                continue
            torch.nn.utils.clip_grad_norm_(self.unet.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad()
            if self.ema_unet is not None:
                self.ema_unet.step(self.unet.parameters())
            step += 1
            if step % self.cfg.save_every == 0:
                self.save_weights(step)
            print(f"step {step} loss {loss:.4f}")


def make_instance_images(cfg, rng):
    yy, xx = np.mgrid[0:cfg.resolution, 0:cfg.resolution] / cfg.resolution
    imgs = []
    for _ in range(4):
        cx, cy = rng.uniform(0.3, 0.7, 2)
        blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.05)
        imgs.append(np.stack([blob, 0.6 * blob, 0.3 + 0.2 * blob]) * 2 - 1)
    return torch.tensor(np.stack(imgs), dtype=torch.float32)


def main():
    cfg = DreamBoothConfig()
    torch.manual_seed(cfg.seed)
    trainer = DreamBoothTrainer(cfg, make_instance_images(cfg, np.random.RandomState(cfg.seed)))
    trainer.train()
    print("checkpoints:", sorted(trainer.checkpoints), "previews:", len(trainer.previews))


main()
