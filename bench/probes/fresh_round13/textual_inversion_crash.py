# expect: nonleaf_optimizer
# source: https://github.com/huggingface/diffusers/pull/266
"""Textual inversion: learn a new placeholder token for a frozen generator.

A placeholder token is added to the tokenizer and the text encoder's token
embedding is resized; the new row is initialised from an initializer token.
The denoiser and every text-encoder module except the token embedding are
frozen, and only the placeholder embedding is meant to be learned with a
simple denoising objective on synthetic "latents".
"""
import argparse
import itertools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Tokenizer:
    def __init__(self, words):
        self.vocab = {w: i for i, w in enumerate(words)}

    def add_tokens(self, token):
        if token in self.vocab:
            return 0
        self.vocab[token] = len(self.vocab)
        return 1

    def convert_tokens_to_ids(self, token):
        return self.vocab[token]

    def __len__(self):
        return len(self.vocab)

    def __call__(self, text, max_len=6):
        ids = [self.vocab.get(w, 0) for w in text.split()][:max_len]
        return torch.tensor(ids + [0] * (max_len - len(ids)))


class TextEncoder(nn.Module):
    def __init__(self, vocab_size, dim=16):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.position_embedding = nn.Embedding(8, dim)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 2, 32, batch_first=True), 1)
        self.final_layer_norm = nn.LayerNorm(dim)

    def get_input_embeddings(self):
        return self.token_embedding

    def resize_token_embeddings(self, n):
        old = self.token_embedding
        new = nn.Embedding(n, old.embedding_dim)
        new.weight.data[: old.num_embeddings] = old.weight.data
        self.token_embedding = new

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        h = self.token_embedding(ids) + self.position_embedding(pos)
        return self.final_layer_norm(self.encoder(h))


class UNet(nn.Module):
    def __init__(self, dim=16, ch=4):
        super().__init__()
        self.inp = nn.Conv2d(ch, dim, 3, padding=1)
        self.cond = nn.Linear(dim, dim)
        self.out = nn.Conv2d(dim, ch, 3, padding=1)

    def forward(self, x, t, context):
        h = self.inp(x) + self.cond(context.mean(1))[:, :, None, None] * (1 + t[:, None, None, None])
        return self.out(F.silu(h))


def freeze_params(params):
    for p in params:
        p.requires_grad = False


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--placeholder_token", default="<cat-toy>")
    p.add_argument("--initializer_token", default="toy")
    p.add_argument("--learning_rate", type=float, default=5e-3)
    p.add_argument("--max_train_steps", type=int, default=10)
    p.add_argument("--train_batch_size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    tokenizer = Tokenizer(["<pad>", "a", "photo", "of", "toy", "cat", "on", "table"])
    text_encoder, unet = TextEncoder(len(tokenizer)), UNet()

    tokenizer.add_tokens(args.placeholder_token)
    initializer_token_id = tokenizer.convert_tokens_to_ids(args.initializer_token)
    placeholder_token_id = tokenizer.convert_tokens_to_ids(args.placeholder_token)
    text_encoder.resize_token_embeddings(len(tokenizer))

    token_embeds = text_encoder.get_input_embeddings().weight.data
    token_embeds[placeholder_token_id] = token_embeds[initializer_token_id]

    freeze_params(unet.parameters())
    freeze_params(itertools.chain(
        text_encoder.encoder.parameters(),
        text_encoder.final_layer_norm.parameters(),
        text_encoder.position_embedding.parameters(),
    ))

    placeholder_embedding = text_encoder.get_input_embeddings().weight[placeholder_token_id]
    optimizer = torch.optim.AdamW([placeholder_embedding], lr=args.learning_rate, weight_decay=0.0)  # raises

    prompts = [f"a photo of {args.placeholder_token}", f"a {args.placeholder_token} on table"]
    orig_embeds = text_encoder.get_input_embeddings().weight.data.clone()
    for step in range(args.max_train_steps):
        ids = torch.stack([tokenizer(prompts[i % 2]) for i in range(args.train_batch_size)])
        latents = torch.randn(args.train_batch_size, 4, 8, 8)
        noise = torch.randn_like(latents)
        t = torch.rand(args.train_batch_size)
        noisy = torch.sqrt(1 - t)[:, None, None, None] * latents + torch.sqrt(t)[:, None, None, None] * noise
        pred = unet(noisy, t, text_encoder(ids))
        loss = F.mse_loss(pred, noise)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            keep = torch.arange(len(tokenizer)) != placeholder_token_id
            text_encoder.get_input_embeddings().weight[keep] = orig_embeds[keep]
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {args.learning_rate:.0e} log {math.log10(loss.item()):.2f}")


if __name__ == "__main__":
    main()
