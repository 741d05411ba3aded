# expect: clean
# source: https://github.com/huggingface/diffusers/pull/2586
"""ControlNet training script (diffusers-style) on a tiny latent UNet.

A ControlNet copy of the UNet encoder produces per-resolution residuals from a
conditioning image; the UNet adds them to its skip connections. The script can
optionally fine-tune the UNet together with the ControlNet (``--train_unet``).
Synthetic latents, captions and conditioning maps; runs on CPU.
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="tiny controlnet trainer")
    p.add_argument("--resolution", type=int, default=16)
    p.add_argument("--latent_channels", type=int, default=4)
    p.add_argument("--block_channels", type=int, nargs="+", default=[16, 32])
    p.add_argument("--train_batch_size", type=int, default=2)
    p.add_argument("--max_train_steps", type=int, default=3)
    p.add_argument("--learning_rate", type=float, default=1e-4)
    p.add_argument("--unet_learning_rate", type=float, default=1e-5)
    p.add_argument("--lr_warmup_steps", type=int, default=1)
    p.add_argument("--num_train_timesteps", type=int, default=100)
    p.add_argument("--train_unet", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--conditioning_scale", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class DDPMScheduler:
    def __init__(self, num_train_timesteps=100, beta_start=1e-4, beta_end=2e-2):
        self.num_train_timesteps = num_train_timesteps
        betas = torch.linspace(beta_start, beta_end, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)

    def add_noise(self, x0, noise, t):
        a = self.alphas_cumprod[t].sqrt().view(-1, 1, 1, 1)
        s = (1 - self.alphas_cumprod[t]).sqrt().view(-1, 1, 1, 1)
        return a * x0 + s * noise


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout, temb_dim):
        super().__init__()
        self.norm1 = nn.GroupNorm(4, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb_proj = nn.Linear(temb_dim, cout)
        self.norm2 = nn.GroupNorm(4, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class DownBlock(nn.Module):
    def __init__(self, cin, cout, temb_dim, add_downsample=True):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock(cin, cout, temb_dim), ResnetBlock(cout, cout, temb_dim)])
        self.downsample = nn.Conv2d(cout, cout, 3, stride=2, padding=1) if add_downsample else None

    def forward(self, x, temb):
        res = ()
        for r in self.resnets:
            x = r(x, temb)
            res = res + (x,)
        if self.downsample is not None:
            x = self.downsample(x)
            res = res + (x,)
        return x, res


class UpBlock(nn.Module):
    def __init__(self, cin, skip_channels, cout, temb_dim, add_upsample=True):
        super().__init__()
        self.resnets = nn.ModuleList()
        for i, cskip in enumerate(skip_channels):
            self.resnets.append(ResnetBlock((cin if i == 0 else cout) + cskip, cout, temb_dim))
        self.upsample = nn.Conv2d(cout, cout, 3, padding=1) if add_upsample else None

    def forward(self, x, res_samples, temb):
        for r in self.resnets:
            skip = res_samples[-1]
            res_samples = res_samples[:-1]
            x = r(torch.cat([x, skip], dim=1), temb)
        if self.upsample is not None:
            x = self.upsample(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return x, res_samples


class UNet2DConditionModel(nn.Module):
    def __init__(self, in_ch=4, chs=(16, 32), temb_dim=32):
        super().__init__()
        self.temb_dim = temb_dim
        self.time_mlp = nn.Sequential(nn.Linear(temb_dim, temb_dim), nn.SiLU(), nn.Linear(temb_dim, temb_dim))
        self.cond_proj = nn.Linear(temb_dim, temb_dim)
        self.conv_in = nn.Conv2d(in_ch, chs[0], 3, padding=1)
        self.down_blocks = nn.ModuleList([
            DownBlock(chs[0], chs[0], temb_dim, True),
            DownBlock(chs[0], chs[1], temb_dim, False),
        ])
        self.mid_block = ResnetBlock(chs[1], chs[1], temb_dim)
        self.up_blocks = nn.ModuleList([
            UpBlock(chs[1], [chs[1], chs[1], chs[0]], chs[1], temb_dim, add_upsample=True),
            UpBlock(chs[1], [chs[0], chs[0], chs[0]], chs[0], temb_dim, add_upsample=False),
        ])
        self.conv_out = nn.Conv2d(chs[0], in_ch, 3, padding=1)

    def embed(self, timesteps, encoder_hidden_states):
        temb = self.time_mlp(timestep_embedding(timesteps, self.temb_dim))
        return temb + self.cond_proj(encoder_hidden_states.mean(dim=1))

    def forward(self, sample, timesteps, encoder_hidden_states,
                down_block_additional_residuals=None, mid_block_additional_residual=None):
        temb = self.embed(timesteps, encoder_hidden_states)
        sample = self.conv_in(sample)
        down_block_res_samples = (sample,)
        for block in self.down_blocks:
            sample, res = block(sample, temb)
            down_block_res_samples += res

        if down_block_additional_residuals is not None:
            new_down_block_res_samples = ()
            for down_block_res_sample, down_block_additional_residual in zip(
                down_block_res_samples, down_block_additional_residuals
            ):
                down_block_res_sample = down_block_res_sample + down_block_additional_residual
                new_down_block_res_samples += (down_block_res_sample,)
            down_block_res_samples = new_down_block_res_samples

        sample = self.mid_block(sample, temb)
        if mid_block_additional_residual is not None:
            sample = sample + mid_block_additional_residual

        for block in self.up_blocks:
            n = len(block.resnets)
            sample, _ = block(sample, down_block_res_samples[-n:], temb)
            down_block_res_samples = down_block_res_samples[:-n]
        return self.conv_out(F.silu(sample))


def zero_module(m):
    for p in m.parameters():
        nn.init.zeros_(p)
    return m


class ControlNetModel(nn.Module):
    @classmethod
    def from_unet(cls, unet, cond_channels=3):
        net = cls(unet, cond_channels)
        net.load_state_dict({k: v for k, v in unet.state_dict().items() if k in net.state_dict()}, strict=False)
        return net

    def __init__(self, unet, cond_channels=3):
        super().__init__()
        chs = [unet.conv_in.out_channels, unet.mid_block.conv2.out_channels]
        self.temb_dim = unet.temb_dim
        self.time_mlp = nn.Sequential(nn.Linear(self.temb_dim, self.temb_dim), nn.SiLU(),
                                      nn.Linear(self.temb_dim, self.temb_dim))
        self.cond_proj = nn.Linear(self.temb_dim, self.temb_dim)
        self.conv_in = nn.Conv2d(unet.conv_in.in_channels, chs[0], 3, padding=1)
        self.cond_embedding = nn.Sequential(nn.Conv2d(cond_channels, 8, 3, padding=1), nn.SiLU(),
                                            zero_module(nn.Conv2d(8, chs[0], 3, padding=1)))
        self.down_blocks = nn.ModuleList([DownBlock(chs[0], chs[0], self.temb_dim, True),
                                          DownBlock(chs[0], chs[1], self.temb_dim, False)])
        self.mid_block = ResnetBlock(chs[1], chs[1], self.temb_dim)
        self.controlnet_down_blocks = nn.ModuleList(
            [zero_module(nn.Conv2d(c, c, 1)) for c in [chs[0], chs[0], chs[0], chs[0], chs[1], chs[1]]])
        self.controlnet_mid_block = zero_module(nn.Conv2d(chs[1], chs[1], 1))

    def forward(self, sample, timesteps, encoder_hidden_states, controlnet_cond, conditioning_scale=1.0):
        temb = self.time_mlp(timestep_embedding(timesteps, self.temb_dim))
        temb = temb + self.cond_proj(encoder_hidden_states.mean(dim=1))
        sample = self.conv_in(sample) + self.cond_embedding(controlnet_cond)
        res_samples = (sample,)
        for block in self.down_blocks:
            sample, res = block(sample, temb)
            res_samples += res
        sample = self.mid_block(sample, temb)
        down = [blk(r) * conditioning_scale for blk, r in zip(self.controlnet_down_blocks, res_samples)]
        mid = self.controlnet_mid_block(sample) * conditioning_scale
        return down, mid


def get_scheduler(optimizer, warmup, total):
    def lr_lambda(step):
        if step < warmup:
            return float(step + 1) / float(max(1, warmup))
        return max(0.0, 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


class Trainer:
    def __init__(self, args):
        self.args = args
        self.noise_scheduler = DDPMScheduler(args.num_train_timesteps)
        self.unet = UNet2DConditionModel(args.latent_channels, tuple(args.block_channels))
        self.controlnet = ControlNetModel.from_unet(self.unet)
        self.unet.requires_grad_(args.train_unet)
        self.controlnet.train()
        groups = [{"params": self.controlnet.parameters(), "lr": args.learning_rate}]
        if args.train_unet:
            self.unet.train()
            groups.append({"params": self.unet.parameters(), "lr": args.unet_learning_rate})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=1e-2)
        self.lr_scheduler = get_scheduler(self.optimizer, args.lr_warmup_steps, args.max_train_steps)
        self.global_step = 0
        self.history = []

    def make_batch(self):
        a = self.args
        latents = torch.randn(a.train_batch_size, a.latent_channels, a.resolution, a.resolution)
        cond = torch.rand(a.train_batch_size, 3, a.resolution, a.resolution)
        text = torch.randn(a.train_batch_size, 6, self.unet.temb_dim)
        return {"latents": latents, "conditioning_pixel_values": cond, "encoder_hidden_states": text}

    def train_step(self, batch):
        latents = batch["latents"]
        noise = torch.randn_like(latents)
        t = torch.randint(0, self.noise_scheduler.num_train_timesteps, (latents.shape[0],))
        noisy = self.noise_scheduler.add_noise(latents, noise, t)
        down, mid = self.controlnet(noisy, t, batch["encoder_hidden_states"],
                                    batch["conditioning_pixel_values"], self.args.conditioning_scale)
        model_pred = self.unet(noisy, t, batch["encoder_hidden_states"],
                               down_block_additional_residuals=down,
                               mid_block_additional_residual=mid)
        loss = F.mse_loss(model_pred.float(), noise.float(), reduction="mean")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.controlnet.parameters(), 1.0)
        self.optimizer.step()
        self.lr_scheduler.step()
        self.global_step += 1
        return loss.item()

    @torch.no_grad()
    def log_validation(self):
        batch = self.make_batch()
        t = torch.full((batch["latents"].shape[0],), self.noise_scheduler.num_train_timesteps - 1)
        down, mid = self.controlnet(batch["latents"], t, batch["encoder_hidden_states"],
                                    batch["conditioning_pixel_values"])
        out = self.unet(batch["latents"], t, batch["encoder_hidden_states"], down, mid)
        return float(out.abs().mean())

    def train(self):
        for _ in range(self.args.max_train_steps):
            self.history.append(self.train_step(self.make_batch()))
        return self.history, self.log_validation()


def main():
    args = parse_args([])
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    losses, val = Trainer(args).train()
    print("losses", [round(l, 4) for l in losses], "val", round(val, 4))


if __name__ == "__main__":
    main()
