# expect: nonleaf_optimizer
# source: https://github.com/aliasgharkhani/SLiMe/issues/10
import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


@dataclass
class Config:
    part_names: List[str] = field(default_factory=lambda: ["background", "head", "body", "tail"])
    text_prompt: Optional[str] = None
    optimizer: str = "Adam"
    lr: float = 0.05
    epochs: int = 3
    train_samples: int = 4
    image_size: int = 16
    embed_dim: int = 32
    max_tokens: int = 8
    seed: int = 0


class ToyTokenizer:
    def __init__(self, max_tokens):
        self.max_tokens = max_tokens
        self.vocab = {"<sot>": 0, "<eot>": 1, "<pad>": 2, "part": 3, "": 4}

    def __call__(self, text):
        words = [w for w in text.split(" ") if w]
        ids = [0] + [self.vocab.setdefault(w, len(self.vocab)) for w in words] + [1]
        ids = ids + [2] * (self.max_tokens - len(ids))
        return torch.tensor(ids[: self.max_tokens]).unsqueeze(0)


class TextEncoder(nn.Module):
    def __init__(self, vocab_size, dim, max_tokens):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.position_embedding = nn.Parameter(torch.randn(1, max_tokens, dim) * 0.02)
        self.layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=2 * dim, dropout=0.0, batch_first=True)
        self.final_layer_norm = nn.LayerNorm(dim)

    def forward(self, ids):
        h = self.token_embedding(ids) + self.position_embedding
        return self.final_layer_norm(self.layer(h))


class StableDiffusion:
    """Small stand-in: a frozen image encoder queried by text tokens through cross-attention."""

    def __init__(self, dim, max_tokens):
        self.dim = dim
        self.tokenizer = ToyTokenizer(max_tokens)
        self.text_encoder = TextEncoder(64, dim, max_tokens)
        self.unet = nn.Sequential(nn.Conv2d(3, dim, 3, padding=1), nn.GELU(), nn.Conv2d(dim, dim, 3, padding=1))
        self.to_q = nn.Linear(dim, dim, bias=False)

    def get_text_embeds(self, prompt, negative_prompt):
        text_embeddings = self.text_encoder(self.tokenizer(prompt))
        uncond_embeddings = self.text_encoder(self.tokenizer(negative_prompt))
        return uncond_embeddings, text_embeddings

    def setup(self):
        for p in list(self.unet.parameters()) + list(self.to_q.parameters()):
            p.requires_grad_(False)

    def train_step(self, t_embedding, image, token_ids):
        feats = self.unet(image)[0]                       # [D, H, W]
        h, w = feats.shape[1:]
        q = self.to_q(feats.flatten(1).t())               # [HW, D]
        k = t_embedding[1]                                # conditional half, [L, D]
        attn = q @ k.t() / math.sqrt(self.dim)            # [HW, L]
        return attn[:, token_ids].t().reshape(len(token_ids), h, w)


class Slime:
    def __init__(self, config):
        self.config = config
        self.stable_diffusion = StableDiffusion(config.embed_dim, config.max_tokens)
        self.num_parts = len(config.part_names)

        self.prepare_text_embeddings()
        del self.stable_diffusion.tokenizer
        del self.stable_diffusion.text_encoder

        self.embeddings_to_optimize = []
        for i in range(1, self.num_parts):
            embedding = self.text_embedding[:, i : i + 1].clone()
            embedding.requires_grad_(True)
            self.embeddings_to_optimize.append(embedding)

        self.token_ids = list(range(self.num_parts))

    def prepare_text_embeddings(self):
        if self.config.text_prompt is None:
            text_prompt = " ".join(["part" for _ in range(self.num_parts)])
        else:
            text_prompt = self.config.text_prompt
        (
            self.uncond_embedding,
            self.text_embedding,
        ) = self.stable_diffusion.get_text_embeds(text_prompt, "")

    def on_fit_start(self):
        self.stable_diffusion.setup()

    def training_step(self, batch):
        image, mask = batch
        num_pixels = torch.bincount(mask.flatten(), minlength=self.num_parts).float()
        pixel_weights = torch.where(num_pixels > 0, num_pixels.sum() / num_pixels.clamp(min=1), torch.zeros_like(num_pixels))
        pixel_weights[0] = 1
        text_embedding = torch.cat(
            [
                self.text_embedding[:, 0:1],
                *self.embeddings_to_optimize,
                self.text_embedding[:, 1 + len(self.embeddings_to_optimize) :],
            ],
            dim=1,
        )
        t_embedding = torch.cat([self.uncond_embedding, text_embedding])
        attention_maps = self.stable_diffusion.train_step(t_embedding, image, self.token_ids)
        return F.cross_entropy(attention_maps[None], mask[None], weight=pixel_weights)

    def configure_optimizers(self):
        parameters = [{"params": self.embeddings_to_optimize, "lr": self.config.lr}]
        optimizer = getattr(optim, self.config.optimizer)(parameters, lr=self.config.lr)  # raises
        return optimizer


def make_dataset(config):
    g = torch.Generator().manual_seed(config.seed)
    s = config.image_size
    samples = []
    for _ in range(config.train_samples):
        image = torch.rand(1, 3, s, s, generator=g)
        mask = torch.zeros(s, s, dtype=torch.long)
        mask[2:7, 3:9] = 1
        mask[7:13, 4:13] = 2
        mask[9:12, 13:16] = 3
        image[0, :, mask > 0] += 0.5 * mask[mask > 0].float() / 3
        samples.append((image, mask))
    return samples


def fit(module, dataset, epochs):
    module.on_fit_start()
    optimizer = module.configure_optimizers()
    for epoch in range(epochs):
        total = 0.0
        for batch in dataset:
            loss = module.training_step(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: mean loss {total / len(dataset):.4f}")


def main():
    config = Config()
    torch.manual_seed(config.seed)
    module = Slime(config)
    fit(module, make_dataset(config), config.epochs)
    norms = [e.norm().item() for e in module.embeddings_to_optimize]
    print("learned part embeddings:", ["%.3f" % n for n in norms])


if __name__ == "__main__":
    main()
