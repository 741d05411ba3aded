# expect: clean
# source: https://github.com/google/break-a-scene/pull/20
"""Break-A-Scene style concept extraction with learned tokens + LoRA (ptp_utils layout).

A tiny latent denoiser with cross-attention to text embeddings is trained on
one image: new placeholder token embeddings (textual inversion) and LoRA
adapters on the attention projections are optimised with the diffusion loss
plus a cross-attention mask loss.  Attention maps are collected by a
prompt-to-prompt AttentionStore controller that the custom attention processor
calls on every attention layer.  Two optimisers (tokens / LoRA), warmup
scheduler, argparse config.  Synthetic latents and masks, CPU only.
"""
import abc
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--num_tokens", type=int, default=2)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--lora_rank", type=int, default=4)
    p.add_argument("--initial_learning_rate", type=float, default=5e-4)
    p.add_argument("--learning_rate", type=float, default=2e-4)
    p.add_argument("--max_train_steps", type=int, default=4)
    p.add_argument("--lambda_attention", type=float, default=1e-2)
    p.add_argument("--apply_masked_loss", action="store_false")
    return p.parse_args([])


class AttentionControl(abc.ABC):
    def step_callback(self, x_t):
        return x_t

    def between_steps(self):
        return

    @property
    def num_uncond_att_layers(self):
        return 0

    @abc.abstractmethod
    def forward(self, attn, is_cross: bool, place_in_unet: str):
        raise NotImplementedError

    def __call__(self, attn, is_cross: bool, place_in_unet: str):
        if self.cur_att_layer >= self.num_uncond_att_layers:
            attn_ = attn.clone()
            h = attn.shape[0]
            attn_[h // 2:] = self.forward(attn[h // 2:], is_cross, place_in_unet)
        self.cur_att_layer += 1
        if self.cur_att_layer == self.num_att_layers + self.num_uncond_att_layers:
            self.cur_att_layer = 0
            self.cur_step += 1
            self.between_steps()
        return attn_

    def reset(self):
        self.cur_step = 0
        self.cur_att_layer = 0

    def __init__(self):
        self.cur_step = 0
        self.num_att_layers = -1
        self.cur_att_layer = 0


class AttentionStore(AttentionControl):
    @staticmethod
    def get_empty_store():
        return {"down_cross": [], "mid_cross": [], "up_cross": [],
                "down_self": [], "mid_self": [], "up_self": []}

    def forward(self, attn, is_cross: bool, place_in_unet: str):
        key = f"{place_in_unet}_{'cross' if is_cross else 'self'}"
        if attn.shape[1] <= 32 ** 2:
            self.step_store[key].append(attn)
        return attn

    def between_steps(self):
        self.attention_store = self.step_store
        self.step_store = self.get_empty_store()

    def reset(self):
        super().reset()
        self.step_store = self.get_empty_store()
        self.attention_store = {}

    def __init__(self):
        super().__init__()
        self.step_store = self.get_empty_store()
        self.attention_store = {}


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank):
        super().__init__()
        self.base = base
        self.base.requires_grad_(False)
        self.lora_down = nn.Linear(base.in_features, rank, bias=False)
        self.lora_up = nn.Linear(rank, base.out_features, bias=False)
        nn.init.normal_(self.lora_down.weight, std=1.0 / rank)
        nn.init.zeros_(self.lora_up.weight)

    def forward(self, x):
        return self.base(x) + self.lora_up(self.lora_down(x))


class Attention(nn.Module):
    def __init__(self, dim, heads, context_dim=None):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_v = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.processor = None

    def head_to_batch_dim(self, t):
        b, n, d = t.shape
        return t.view(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3).reshape(b * self.heads, n, d // self.heads)

    def batch_to_head_dim(self, t):
        bh, n, d = t.shape
        return t.view(bh // self.heads, self.heads, n, d).permute(0, 2, 1, 3).reshape(bh // self.heads, n, d * self.heads)

    def get_attention_scores(self, query, key):
        return (torch.bmm(query, key.transpose(1, 2)) * self.scale).softmax(dim=-1)

    def forward(self, hidden_states, encoder_hidden_states=None):
        return self.processor(self, hidden_states, encoder_hidden_states)


class P2PCrossAttnProcessor:
    def __init__(self, controller, place_in_unet):
        self.controller = controller
        self.place_in_unet = place_in_unet

    def __call__(self, attn, hidden_states, encoder_hidden_states=None):
        is_cross = encoder_hidden_states is not None
        context = encoder_hidden_states if is_cross else hidden_states
        query = attn.head_to_batch_dim(attn.to_q(hidden_states))
        key = attn.head_to_batch_dim(attn.to_k(context))
        value = attn.head_to_batch_dim(attn.to_v(context))
        attention_probs = attn.get_attention_scores(query, key)
        # one line change
        self.controller(attention_probs, is_cross, self.place_in_unet)
        hidden_states = attn.batch_to_head_dim(torch.bmm(attention_probs, value))
        return attn.to_out(hidden_states)


class TinyUNet(nn.Module):
    def __init__(self, dim, heads, ctx_dim):
        super().__init__()
        self.proj_in = nn.Conv2d(4, dim, 1)
        self.blocks = nn.ModuleDict({
            "down": nn.ModuleList([Attention(dim, heads), Attention(dim, heads, ctx_dim)]),
            "up": nn.ModuleList([Attention(dim, heads), Attention(dim, heads, ctx_dim)]),
        })
        self.time_embed = nn.Linear(1, dim)
        self.proj_out = nn.Conv2d(dim, 4, 1)

    def attn_processors(self):
        for place, blocks in self.blocks.items():
            for blk in blocks:
                yield place, blk

    def forward(self, latents, t, text_emb):
        b, _, h, w = latents.shape
        x = self.proj_in(latents).flatten(2).transpose(1, 2) + self.time_embed(t[:, None].float())[:, None]
        for place, blocks in self.blocks.items():
            x = x + blocks[0](x)
            x = x + blocks[1](x, text_emb)
        return self.proj_out(x.transpose(1, 2).reshape(b, -1, h, w))


class TextEncoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, ids):
        x = self.token_embedding(ids)
        return x + self.encoder(x)


class SpatialDreambooth:
    def __init__(self, args):
        self.args = args
        torch.manual_seed(0)
        self.base_vocab = 50
        self.placeholder_ids = list(range(self.base_vocab, self.base_vocab + args.num_tokens))
        self.text_encoder = TextEncoder(self.base_vocab + args.num_tokens, args.dim)
        self.unet = TinyUNet(args.dim, args.heads, args.dim)
        self.text_encoder.requires_grad_(False)
        self.unet.requires_grad_(False)
        self.text_encoder.token_embedding.weight.requires_grad_(True)
        for _, blk in self.unet.attn_processors():
            blk.to_k = LoRALinear(blk.to_k, args.lora_rank)
            blk.to_v = LoRALinear(blk.to_v, args.lora_rank)
        self.controller = AttentionStore()
        self.register_attention_control(self.controller)
        self.optimizer_tokens = torch.optim.AdamW([self.text_encoder.token_embedding.weight],
                                                  lr=args.initial_learning_rate)
        lora = [p for n, p in self.unet.named_parameters() if "lora" in n]
        self.optimizer_lora = torch.optim.AdamW(lora, lr=args.learning_rate)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer_lora, lambda s: min(1.0, (s + 1) / 2))
        g = torch.Generator().manual_seed(1)
        self.latents = torch.randn(1, 4, 8, 8, generator=g)
        self.masks = (torch.rand(args.num_tokens, 1, 8, 8, generator=g) > 0.5).float()
        self.prompt_ids = torch.tensor([[1, 2] + self.placeholder_ids + [3]])

    def register_attention_control(self, controller):
        count = 0
        for place, blk in self.unet.attn_processors():
            blk.processor = P2PCrossAttnProcessor(controller, place)
            count += 1
        controller.num_att_layers = count

    def add_noise(self, latents, noise, t):
        alpha = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None]
        return alpha * latents + (1 - alpha ** 2).sqrt() * noise

    def get_average_attention(self):
        return {k: [a for a in v] for k, v in self.controller.attention_store.items()}

    def attention_loss(self):
        maps = [a for a in self.get_average_attention()["down_cross"] + self.get_average_attention()["up_cross"]]
        attn = torch.stack(maps).mean(0)  # (b*h, hw, tokens)
        loss = 0.0
        for i, tok in enumerate(range(2, 2 + self.args.num_tokens)):
            a = attn[:, :, tok].mean(0)
            a = a / a.max().clamp(min=1e-6)
            loss = loss + F.mse_loss(a, self.masks[i].flatten())
        return loss / self.args.num_tokens

    def train_step(self, step):
        noise = torch.randn_like(self.latents)
        t = torch.randint(0, 1000, (1,))
        noisy = self.add_noise(self.latents, noise, t)
        text_emb = self.text_encoder(self.prompt_ids)
        pred = self.unet(noisy, t, text_emb)
        if self.args.apply_masked_loss:
            mask = self.masks.max(0, keepdim=True)[0]
            loss = F.mse_loss(pred * mask, noise * mask)
        else:
            loss = F.mse_loss(pred, noise)
        if self.args.lambda_attention:
            loss = loss + self.args.lambda_attention * self.attention_loss()
        self.optimizer_tokens.zero_grad()
        self.optimizer_lora.zero_grad()
        self.backward(loss)
        self.optimizer_tokens.step()
        self.optimizer_lora.step()
        self.lr_scheduler.step()
        self.controller.attention_store = {}
        self.controller.cur_step = 0
        return loss.item()

    @staticmethod
    def backward(loss):
        loss.backward()

    def train(self):
        for step in range(self.args.max_train_steps):
            print("step %d loss %.5f" % (step, self.train_step(step)))


def main():
    SpatialDreambooth(parse_args()).train()


if __name__ == "__main__":
    main()
