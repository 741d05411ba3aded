# expect: freed_graph
# source: https://github.com/MooreThreads/Moore-AnimateAnyone/issues/92
"""Stage-1 training of a pose-guided character animation model (AnimateAnyone-style).

A reference UNet encodes the reference image; hooks on its transformer blocks
("write" mode) store their normalized hidden states in a per-block bank, which
the denoising UNet's blocks ("read" mode) attend to. A pose guider adds pose
features to the noisy latents. Gradient accumulation is handled by a small
accelerator helper. Synthetic frames and poses, CPU only.
"""
import contextlib
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def torch_dfs(model):
    result = [model]
    for child in model.children():
        result += torch_dfs(child)
    return result


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, hidden_states):
        n = self.norm1(hidden_states)
        hidden_states = self.attn1(n, n, n, need_weights=False)[0] + hidden_states
        return self.ff(self.norm3(hidden_states)) + hidden_states


class TemporalBasicTransformerBlock(BasicTransformerBlock):
    pass


class TinyUNet(nn.Module):
    def __init__(self, in_ch, dim, block_cls):
        super().__init__()
        self.conv_in = nn.Conv2d(in_ch, dim, 3, padding=1)
        self.time_proj = nn.Linear(1, dim)
        self.mid_block = nn.ModuleList([block_cls(dim)])
        self.up_blocks = nn.ModuleList([block_cls(dim)])
        self.conv_out = nn.Conv2d(dim, in_ch, 3, padding=1)

    def forward(self, sample, timestep, extra=None):
        h = self.conv_in(sample)
        if extra is not None:
            h = h + extra
        B, C, H, W = h.shape
        tokens = h.flatten(2).transpose(1, 2) + self.time_proj(timestep.float().view(-1, 1, 1) / 1000.0)
        for blk in list(self.mid_block) + list(self.up_blocks):
            tokens = blk(tokens)
        h = tokens.transpose(1, 2).reshape(B, C, H, W)
        return self.conv_out(F.silu(h))


class PoseGuider(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, dim, 3, padding=1))

    def forward(self, pose):
        return self.net(pose)


class ReferenceAttentionControl:
    def __init__(self, unet, mode="write", fusion_blocks="midup"):
        assert mode in ("read", "write")
        self.unet = unet
        self.fusion_blocks = fusion_blocks
        self.register_reference_hooks(mode)

    def _attn_modules(self):
        mods = torch_dfs(self.unet.mid_block) + torch_dfs(self.unet.up_blocks)
        mods = [m for m in mods if isinstance(m, BasicTransformerBlock)]
        return sorted(mods, key=lambda x: -x.norm1.normalized_shape[0])

    def register_reference_hooks(self, mode):
        MODE = mode

        def hacked_basic_transformer_inner_forward(self, hidden_states):
            norm_hidden_states = self.norm1(hidden_states)
            if MODE == "write":
                self.bank.append(norm_hidden_states.clone())
                attn_output = self.attn1(norm_hidden_states, norm_hidden_states, norm_hidden_states,
                                         need_weights=False)[0]
            else:
                modify_norm_hidden_states = torch.cat([norm_hidden_states] + self.bank, dim=1)
                attn_output = self.attn1(norm_hidden_states, modify_norm_hidden_states,
                                         modify_norm_hidden_states, need_weights=False)[0]
            hidden_states = attn_output + hidden_states
            return self.ff(self.norm3(hidden_states)) + hidden_states

        for i, module in enumerate(self._attn_modules()):
            module._original_inner_forward = module.forward
            module.forward = hacked_basic_transformer_inner_forward.__get__(module, type(module))
            module.bank = []
            module.attn_weight = float(i) / float(len(self._attn_modules()))

    def update(self, writer, dtype=torch.float32):
        for r, w in zip(self._attn_modules(), writer._attn_modules()):
            r.bank = [v.clone().to(dtype) for v in w.bank]

    def clear(self):
        for r in self._attn_modules():
            r.bank.clear()


class Net(nn.Module):
    def __init__(self, reference_unet, denoising_unet, pose_guider, reference_control_writer,
                 reference_control_reader):
        super().__init__()
        self.reference_unet = reference_unet
        self.denoising_unet = denoising_unet
        self.pose_guider = pose_guider
        self.reference_control_writer = reference_control_writer
        self.reference_control_reader = reference_control_reader

    def forward(self, noisy_latents, timesteps, ref_image_latents, pose_img, uncond_fwd=False):
        pose_fea = self.pose_guider(pose_img)
        if not uncond_fwd:
            ref_timesteps = torch.zeros_like(timesteps)
            self.reference_unet(ref_image_latents, ref_timesteps)
            self.reference_control_reader.update(self.reference_control_writer)
        return self.denoising_unet(noisy_latents, timesteps, extra=pose_fea)


class Accelerator:
    """Minimal stand-in for accelerate's gradient-accumulation bookkeeping."""

    def __init__(self, gradient_accumulation_steps=1):
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.step = 0
        self.sync_gradients = True

    @contextlib.contextmanager
    def accumulate(self, model):
        self.step += 1
        self.sync_gradients = self.step % self.gradient_accumulation_steps == 0
        yield

    def backward(self, loss):
        loss = loss / self.gradient_accumulation_steps
        loss.backward()  # raises

    def clip_grad_norm_(self, params, max_norm):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)


class WrappedOptimizer:
    def __init__(self, optimizer, accelerator):
        self.optimizer, self.accelerator = optimizer, accelerator

    def step(self):
        if self.accelerator.sync_gradients:
            self.optimizer.step()

    def zero_grad(self):
        if self.accelerator.sync_gradients:
            self.optimizer.zero_grad()


def make_cfg():
    return SimpleNamespace(
        data=SimpleNamespace(train_bs=2, size=8),
        solver=SimpleNamespace(gradient_accumulation_steps=2, learning_rate=1e-4, max_grad_norm=1.0,
                               max_train_steps=4),
        noise_offset=0.05, uncond_ratio=0.0, seed=42, dim=16, latent_channels=4,
    )


def main():
    cfg = make_cfg()
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    reference_unet = TinyUNet(cfg.latent_channels, cfg.dim, BasicTransformerBlock)
    denoising_unet = TinyUNet(cfg.latent_channels, cfg.dim, TemporalBasicTransformerBlock)
    pose_guider = PoseGuider(cfg.dim)
    writer = ReferenceAttentionControl(reference_unet, mode="write")
    reader = ReferenceAttentionControl(denoising_unet, mode="read")
    net = Net(reference_unet, denoising_unet, pose_guider, writer, reader)

    accelerator = Accelerator(cfg.solver.gradient_accumulation_steps)
    trainable_params = [p for p in net.parameters() if p.requires_grad]
    optimizer = WrappedOptimizer(torch.optim.AdamW(trainable_params, lr=cfg.solver.learning_rate), accelerator)
    betas = torch.linspace(1e-4, 2e-2, 1000)
    alphas_cumprod = torch.cumprod(1 - betas, 0)

    global_step, train_loss = 0, 0.0
    for _ in range(cfg.solver.max_train_steps):
        B, S = cfg.data.train_bs, cfg.data.size
        latents = torch.randn(B, cfg.latent_channels, S, S)
        ref_latents = torch.randn(B, cfg.latent_channels, S, S)
        pose = torch.rand(B, 3, S, S)
        with accelerator.accumulate(net):
            noise = torch.randn_like(latents) + cfg.noise_offset * torch.randn(B, cfg.latent_channels, 1, 1)
            timesteps = torch.randint(0, 1000, (B,))
            a = alphas_cumprod[timesteps].sqrt().view(-1, 1, 1, 1)
            s = (1 - alphas_cumprod[timesteps]).sqrt().view(-1, 1, 1, 1)
            noisy_latents = a * latents + s * noise
            uncond_fwd = random.random() < cfg.uncond_ratio
            model_pred = net(noisy_latents, timesteps, ref_latents, pose, uncond_fwd)
            loss = F.mse_loss(model_pred.float(), noise.float(), reduction="mean")
            train_loss += loss.item() / cfg.solver.gradient_accumulation_steps

            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(trainable_params, cfg.solver.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()

        if accelerator.sync_gradients:
            reference_control_reader = net.reference_control_reader
            reference_control_writer = net.reference_control_writer
            reference_control_reader.clear()
            reference_control_writer.clear()
            global_step += 1
            print(f"global_step {global_step} train_loss {train_loss:.4f}")
            train_loss = 0.0


if __name__ == "__main__":
    main()
