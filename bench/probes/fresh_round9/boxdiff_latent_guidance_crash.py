# expect: grad_unused
# source: https://github.com/showlab/BoxDiff/issues/20
"""BoxDiff-style training-free box-constrained text-to-image sampling on a tiny
latent denoiser: cross-attention maps are collected by an AttentionStore via custom
attention processors, and the latents are nudged each step by the inner-box /
outer-box / corner constraints before the classifier-free-guided DDIM update."""
from collections import namedtuple
from dataclasses import dataclass, field
from typing import List

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class RunConfig:
    prompt: str = "a cat and a dog"
    token_indices: List[int] = field(default_factory=lambda: [2, 5])
    bbox: List[List[int]] = field(default_factory=lambda: [[64, 128, 256, 448], [256, 64, 448, 384]])
    seed: int = 42
    n_inference_steps: int = 5
    guidance_scale: float = 7.5
    max_iter_to_alter: int = 4
    scale_factor: int = 20
    scale_range: tuple = (1.0, 0.5)
    attention_res: int = 8
    P: float = 0.2  # top-k ratio for the inner/outer box constraints
    L: int = 1  # corner constraint width


class AttentionStore:
    def __init__(self):
        self.num_att_layers, self.cur_att_layer, self.cur_step = -1, 0, 0
        self.step_store, self.attention_store = self.get_empty_store(), {}

    @staticmethod
    def get_empty_store():
        return {"down_cross": [], "mid_cross": [], "up_cross": []}

    def __call__(self, attn, is_cross: bool, place_in_unet: str):
        if attn.shape[1] <= 32 ** 2:  # avoid memory overhead
            self.step_store[f"{place_in_unet}_{'cross' if is_cross else 'self'}"].append(attn)
        self.cur_att_layer += 1
        if self.cur_att_layer == self.num_att_layers:
            self.cur_att_layer, self.cur_step = 0, self.cur_step + 1
            self.attention_store, self.step_store = self.step_store, self.get_empty_store()

    def get_average_attention(self):
        return self.attention_store


def aggregate_attention(attention_store: AttentionStore, res: int, from_where, is_cross: bool, select: int):
    out, attention_maps = [], attention_store.get_average_attention()
    for location in from_where:
        for item in attention_maps[f"{location}_{'cross' if is_cross else 'self'}"]:
            if item.shape[1] == res ** 2:
                out.append(item.reshape(1, -1, res, res, item.shape[-1])[select])
    out = torch.cat(out, dim=0)
    return out.sum(0) / out.shape[0]


class CrossAttention(nn.Module):
    def __init__(self, dim, context_dim, heads=2):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q, self.to_k = nn.Linear(dim, dim, bias=False), nn.Linear(context_dim, dim, bias=False)
        self.to_v, self.to_out = nn.Linear(context_dim, dim, bias=False), nn.Linear(dim, dim)
        self.processor = None

    def head_to_batch_dim(self, x):
        b, n, d = x.shape
        return x.reshape(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3).reshape(b * self.heads, n, -1)

    def forward(self, hidden_states, encoder_hidden_states):
        return self.processor(self, hidden_states, encoder_hidden_states)


class AttendExciteCrossAttnProcessor:
    def __init__(self, attnstore, place_in_unet):
        self.attnstore, self.place_in_unet = attnstore, place_in_unet

    def __call__(self, attn, hidden_states, encoder_hidden_states):
        b, n, d = hidden_states.shape
        query = attn.head_to_batch_dim(attn.to_q(hidden_states))
        key = attn.head_to_batch_dim(attn.to_k(encoder_hidden_states))
        value = attn.head_to_batch_dim(attn.to_v(encoder_hidden_states))
        attention_probs = (query @ key.transpose(-1, -2) * attn.scale).softmax(-1)
        self.attnstore(attention_probs, True, self.place_in_unet)
        hidden_states = torch.bmm(attention_probs, value)
        hidden_states = hidden_states.reshape(b, attn.heads, n, -1).permute(0, 2, 1, 3).reshape(b, n, d)
        return attn.to_out(hidden_states)


UNet2DConditionOutput = namedtuple("UNet2DConditionOutput", ["sample"])


class TinyUNet2DCondition(nn.Module):
    def __init__(self, in_channels=4, ch=32, context_dim=16):
        super().__init__()
        self.config = {"in_channels": in_channels}
        self.conv_in, self.time_proj = nn.Conv2d(in_channels, ch, 3, padding=1), nn.Linear(1, ch)
        self.down_attn, self.down = CrossAttention(ch, context_dim), nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mid_attn = CrossAttention(ch, context_dim)
        self.up, self.up_attn = nn.ConvTranspose2d(ch, ch, 2, stride=2), CrossAttention(ch, context_dim)
        self.conv_out = nn.Conv2d(ch, in_channels, 3, padding=1)

    def attn_processors(self):
        return {"down_blocks.0.attn2.processor": self.down_attn, "mid_block.attn2.processor": self.mid_attn,
                "up_blocks.0.attn2.processor": self.up_attn}

    @staticmethod
    def _attend(attn, h, ctx):
        b, c, hh, ww = h.shape
        tokens = h.flatten(2).transpose(1, 2)
        return h + attn(tokens, ctx).transpose(1, 2).reshape(b, c, hh, ww)

    def forward(self, sample, timestep, encoder_hidden_states):
        temb = self.time_proj(torch.tensor([[float(timestep) / 1000.0]]))[:, :, None, None]
        h = F.silu(self.conv_in(sample) + temb)
        skip = h = self._attend(self.down_attn, h, encoder_hidden_states)
        h = self._attend(self.mid_attn, F.silu(self.down(h)), encoder_hidden_states)
        h = self._attend(self.up_attn, F.silu(self.up(h)) + skip, encoder_hidden_states)
        return UNet2DConditionOutput(sample=self.conv_out(h))


def register_attention_control(unet, controller):
    cross_att_count = 0
    for name, module in unet.attn_processors().items():
        place_in_unet = "mid" if name.startswith("mid_block") else "up" if name.startswith("up_blocks") else "down"
        module.processor = AttendExciteCrossAttnProcessor(attnstore=controller, place_in_unet=place_in_unet)
        cross_att_count += 1
    controller.num_att_layers = cross_att_count


class DDIMScheduler:
    def __init__(self, num_train_timesteps=1000):
        betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, num_train_timesteps) ** 2
        self.alphas_cumprod, self.num_train_timesteps = torch.cumprod(1.0 - betas, 0), num_train_timesteps

    def set_timesteps(self, n):
        self.step_ratio = self.num_train_timesteps // n
        self.timesteps = (torch.arange(0, n) * self.step_ratio).flip(0)

    def step(self, noise_pred, t, latents):
        a_t, prev = self.alphas_cumprod[t], t - self.step_ratio
        a_prev = self.alphas_cumprod[prev] if prev >= 0 else torch.tensor(1.0)
        x0 = (latents - (1 - a_t).sqrt() * noise_pred) / a_t.sqrt()
        return x0 * a_prev.sqrt() + (1 - a_prev).sqrt() * noise_pred


class BoxDiffPipeline:
    def __init__(self, unet, text_encoder, vocab, scheduler):
        self.unet, self.text_encoder, self.vocab, self.scheduler = unet, text_encoder, vocab, scheduler

    def _encode_prompt(self, prompt, max_length=8):
        ids = [0] + [self.vocab[w] for w in prompt.split()] + [1]
        ids = torch.tensor([ids + [1] * (max_length - len(ids))])
        uncond = torch.tensor([[0] + [1] * (max_length - 1)])
        return self.text_encoder(torch.cat([uncond, ids]))

    def _compute_max_attention_per_index(self, attention_maps, indices_to_alter, bbox, config):
        attention_for_text = attention_maps[:, :, 1:-1]
        attention_for_text *= 100
        attention_for_text = torch.nn.functional.softmax(attention_for_text, dim=-1)
        indices_to_alter = [index - 1 for index in indices_to_alter]
        max_indices_list_fg, max_indices_list_bg, dist_x, dist_y = [], [], [], []
        for cnt, i in enumerate(indices_to_alter):
            image = attention_for_text[:, :, i]
            box = [max(round(b / (512 / image.shape[0])), 0) for b in bbox[cnt]]
            x1, y1, x2, y2 = box
            obj_mask = torch.zeros_like(image)
            obj_mask[y1:y2, x1:x2] = 1.
            bg_mask = 1 - obj_mask
            # Inner-Box constraint
            k = (obj_mask.sum() * config.P).long()
            max_indices_list_fg.append((image * obj_mask).reshape(-1).topk(k)[0].mean())
            # Outer-Box constraint
            k = (bg_mask.sum() * config.P).long()
            max_indices_list_bg.append((image * bg_mask).reshape(-1).topk(k)[0].mean())
            # Corner Constraint
            gt_proj_x, gt_proj_y = torch.max(obj_mask, dim=0)[0], torch.max(obj_mask, dim=1)[0]
            corner_mask_x, corner_mask_y = torch.zeros_like(gt_proj_x), torch.zeros_like(gt_proj_y)
            N, M = gt_proj_x.shape[0], gt_proj_y.shape[0]
            corner_mask_x[max(box[0] - config.L, 0): min(box[0] + config.L + 1, N)] = 1.
            corner_mask_x[max(box[2] - config.L, 0): min(box[2] + config.L + 1, N)] = 1.
            corner_mask_y[max(box[1] - config.L, 0): min(box[1] + config.L + 1, M)] = 1.
            corner_mask_y[max(box[3] - config.L, 0): min(box[3] + config.L + 1, M)] = 1.
            dist_x.append((F.l1_loss(image.max(dim=0)[0], gt_proj_x, reduction='none') * corner_mask_x).mean())
            dist_y.append((F.l1_loss(image.max(dim=1)[0], gt_proj_y, reduction='none') * corner_mask_y).mean())
        return max_indices_list_fg, max_indices_list_bg, dist_x, dist_y

    @staticmethod
    def _compute_loss(max_attention_per_index_fg, max_attention_per_index_bg, dist_x, dist_y):
        losses_fg = [max(0, 1. - curr_max) for curr_max in max_attention_per_index_fg]
        losses_bg = [max(0, curr_max) for curr_max in max_attention_per_index_bg]
        loss = sum(losses_fg) + sum(losses_bg) + sum(dist_x) + sum(dist_y)
        return max(losses_fg), loss

    @staticmethod
    def _update_latent(latents, loss, step_size):
        grad_cond = torch.autograd.grad(loss.requires_grad_(True), [latents], retain_graph=True)[0]  # raises
        return latents - step_size * grad_cond

    @torch.no_grad()
    def __call__(self, attention_store, config: RunConfig, generator=None):
        prompt_embeds = self._encode_prompt(config.prompt)
        self.scheduler.set_timesteps(config.n_inference_steps)
        latents = torch.randn(1, self.unet.config["in_channels"], 8, 8, generator=generator)
        scale_range = np.linspace(config.scale_range[0], config.scale_range[1], len(self.scheduler.timesteps))
        for i, t in enumerate(self.scheduler.timesteps):
            with torch.enable_grad():
                # Forward pass of denoising with text conditioning
                noise_pred_text = self.unet(latents, t, encoder_hidden_states=prompt_embeds[1].unsqueeze(0)).sample
                self.unet.zero_grad()
                latents = latents.clone().detach().requires_grad_(True)

                attention_maps = aggregate_attention(attention_store, res=config.attention_res,
                                                     from_where=("up", "down", "mid"), is_cross=True, select=0)
                fg, bg, dist_x, dist_y = self._compute_max_attention_per_index(
                    attention_maps, config.token_indices, config.bbox, config)
                loss_fg, loss = self._compute_loss(fg, bg, dist_x, dist_y)
                if i < config.max_iter_to_alter and loss != 0:
                    latents = self._update_latent(latents=latents, loss=loss,
                                                  step_size=config.scale_factor * np.sqrt(scale_range[i]))
                print(f"step {i} t={int(t)} loss={loss.detach().item():.4f}")

            latent_model_input = torch.cat([latents] * 2)
            noise_pred = self.unet(latent_model_input, t, encoder_hidden_states=prompt_embeds).sample
            noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
            noise_pred = noise_pred_uncond + config.guidance_scale * (noise_pred_text - noise_pred_uncond)
            latents = self.scheduler.step(noise_pred, t, latents)
        return latents.detach().numpy()


def main():
    config = RunConfig()
    torch.manual_seed(0)
    vocab = {w: i + 2 for i, w in enumerate(sorted(set(config.prompt.split())))}
    text_encoder = nn.Sequential(nn.Embedding(len(vocab) + 2, 16), nn.Linear(16, 16))
    pipe = BoxDiffPipeline(TinyUNet2DCondition(), text_encoder, vocab, DDIMScheduler())
    controller = AttentionStore()
    register_attention_control(pipe.unet, controller)
    image_latents = pipe(attention_store=controller, config=config, generator=torch.Generator().manual_seed(config.seed))
    print("latents", image_latents.shape, float(np.abs(image_latents).mean()))


if __name__ == "__main__":
    main()
