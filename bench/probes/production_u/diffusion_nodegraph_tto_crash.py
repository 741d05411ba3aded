# expect: inference_tensor
# source: https://github.com/Comfy-Org/ComfyUI/issues/11911
"""Node-graph diffusion runtime with a test-time optimisation node.

A miniature of a ComfyUI-style executor: nodes are registered by name, a
prompt graph is executed node by node (every node runs under
torch.inference_mode, as the executor does), outputs are cached per node id.
The graph loads a small latent denoiser with cross-attention, encodes a text
prompt, and runs an "inference-time optimisation" node that fits a low-rank
adapter on the cross-attention keys so the denoiser matches a guidance
target, before sampling with a DDIM loop. Everything is seeded and on CPU.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NODE_CLASS_MAPPINGS = {}


def register_node(name):
    def deco(cls):
        NODE_CLASS_MAPPINGS[name] = cls
        return cls
    return deco


class CrossAttnDenoiser(nn.Module):
    def __init__(self, latent_dim=8, ctx_dim=12, hidden=32, heads=2):
        super().__init__()
        self.heads, self.hidden = heads, hidden
        self.time_embed = nn.Sequential(nn.Linear(16, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.proj_in = nn.Linear(latent_dim, hidden)
        self.to_q = nn.Linear(hidden, hidden, bias=False)
        self.to_k = nn.Linear(ctx_dim, hidden, bias=False)
        self.to_v = nn.Linear(ctx_dim, hidden, bias=False)
        self.proj_out = nn.Linear(hidden, latent_dim)
        self.k_adapter = None

    @staticmethod
    def timestep_embedding(t, dim=16):
        half = dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def keys(self, context):
        k = self.to_k(context)
        if self.k_adapter is not None:
            down, up = self.k_adapter
            k = k + (context @ down) @ up  # raises
        return k

    def forward(self, x, t, context):
        h = self.proj_in(x) + self.time_embed(self.timestep_embedding(t))
        q = self.to_q(h).view(h.size(0), 1, self.heads, -1).transpose(1, 2)
        k, v = self.keys(context), self.to_v(context)
        if k.size(0) != h.size(0):
            k, v = k.expand(h.size(0), -1, -1), v.expand(h.size(0), -1, -1)
        k = k.reshape(h.size(0), -1, self.heads, self.hidden // self.heads).transpose(1, 2)
        v = v.reshape(h.size(0), -1, self.heads, self.hidden // self.heads).transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(h.size(0), -1)
        return self.proj_out(h + attn)


class TextEncoder(nn.Module):
    def __init__(self, vocab=64, ctx_dim=12, length=6):
        super().__init__()
        self.length = length
        self.embed = nn.Embedding(vocab, ctx_dim)
        self.mix = nn.Linear(ctx_dim, ctx_dim)

    def tokenize(self, text):
        ids = [sum(map(ord, w)) % self.embed.num_embeddings for w in text.split()][: self.length]
        return torch.tensor(ids + [0] * (self.length - len(ids)))[None]

    def forward(self, tokens):
        return torch.tanh(self.mix(self.embed(tokens)))


class ModelPatcher:
    """Holds loaded models; weights are frozen, adapters are attached by nodes."""
    cache = {}

    @classmethod
    def load(cls, name):
        if name not in cls.cache:
            with torch.inference_mode(False):
                gen = torch.manual_seed(1234)
                unet, clip = CrossAttnDenoiser(), TextEncoder()
                for p in list(unet.parameters()) + list(clip.parameters()):
                    p.requires_grad_(False)
            cls.cache[name] = (unet, clip)
        return cls.cache[name]


def ddim_schedule(steps=10, n_train=100):
    betas = torch.linspace(1e-4, 0.02, n_train)
    alphas_cumprod = torch.cumprod(1 - betas, 0)
    timesteps = torch.linspace(n_train - 1, 0, steps).long()
    return alphas_cumprod, timesteps


@register_node("CheckpointLoaderSimple")
class CheckpointLoaderSimple:
    def run(self, ckpt_name):
        return ModelPatcher.load(ckpt_name)


@register_node("CLIPTextEncode")
class CLIPTextEncode:
    def run(self, clip, text):
        return (clip(clip.tokenize(text)),)


@register_node("EmptyLatent")
class EmptyLatent:
    def run(self, batch_size, dim=8, seed=0):
        return (torch.randn(batch_size, dim, generator=torch.Generator().manual_seed(seed)),)


@register_node("InferenceTimeOptimize")
class InferenceTimeOptimize:
    """Fits a rank-r key adapter so eps(x_t, t, cond) matches a guidance target."""

    def run(self, model, positive, latent, steps=20, rank=2, lr=5e-2):
        unet = model
        cond = positive
        with torch.inference_mode(False), torch.enable_grad():
            down = (0.01 * torch.randn(cond.size(-1), rank)).requires_grad_(True)
            up = torch.zeros(rank, unet.hidden, requires_grad=True)
            unet.k_adapter = (down, up)
            opt = torch.optim.Adam([down, up], lr=lr)
            alphas_cumprod, _ = ddim_schedule()
            x0 = torch.tanh(latent.clone())
            for step in range(steps):
                t = torch.randint(0, len(alphas_cumprod), (x0.size(0),))
                noise = torch.randn_like(x0)
                a = alphas_cumprod[t][:, None]
                x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
                eps = unet(x_t, t, cond)
                loss = F.mse_loss(eps, noise)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return (unet, loss.item())


@register_node("KSamplerDDIM")
class KSamplerDDIM:
    def run(self, model, positive, latent, steps=10):
        alphas_cumprod, timesteps = ddim_schedule(steps)
        x = latent
        for i, t in enumerate(timesteps):
            a_t = alphas_cumprod[t]
            a_prev = alphas_cumprod[timesteps[i + 1]] if i + 1 < len(timesteps) else torch.tensor(1.0)
            eps = model(x, t.repeat(x.size(0)), positive)
            x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
        return (x,)


class PromptExecutor:
    def __init__(self):
        self.outputs = {}

    def resolve(self, value):
        if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
            return self.outputs[value[0]][value[1]]
        return value

    def execute(self, prompt):
        for node_id, node in prompt.items():
            obj = NODE_CLASS_MAPPINGS[node["class_type"]]()
            inputs = {k: self.resolve(v) for k, v in node["inputs"].items()}
            with torch.inference_mode():
                self.outputs[node_id] = obj.run(**inputs)
        return self.outputs


def main():
    torch.manual_seed(0)
    prompt = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny-latent-dit"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 1], "text": "a red boat at dawn"}},
        "3": {"class_type": "EmptyLatent", "inputs": {"batch_size": 4}},
        "4": {"class_type": "InferenceTimeOptimize",
              "inputs": {"model": ["1", 0], "positive": ["2", 0], "latent": ["3", 0]}},
        "5": {"class_type": "KSamplerDDIM", "inputs": {"model": ["4", 0], "positive": ["2", 0], "latent": ["3", 0]}},
    }
    outputs = PromptExecutor().execute(prompt)
    print("tto loss %.4f" % outputs["4"][1])
    print("sample norm %.4f" % outputs["5"][0].norm().item())


if __name__ == "__main__":
    main()
