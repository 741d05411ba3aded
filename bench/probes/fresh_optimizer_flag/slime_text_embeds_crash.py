# expect: nonleaf_optimizer
# source: https://github.com/aliasgharkhani/SLiMe/issues/10
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--part_names", nargs="+", type=str, default=["background", "head", "body", "tail"])
    parser.add_argument("--text_prompt", type=str, default=None)
    parser.add_argument("--train", action="store_true", default=True)
    parser.add_argument("--optimizer", type=str, default="Adam")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--train_mask_size", type=int, default=16)
    parser.add_argument("--sd_loss_coef", type=float, default=0.005)
    parser.add_argument("--self_attention_loss_coef", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=3)
    return parser.parse_args()


class Tokenizer:
    model_max_length = 8

    def __init__(self):
        self.vocab = {"<pad>": 0, "<bos>": 1}

    def __call__(self, prompt):
        ids = [1]
        for word in prompt.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.vocab)
            ids.append(self.vocab[word])
        ids = ids[: self.model_max_length]
        ids += [0] * (self.model_max_length - len(ids))
        return torch.tensor([ids])


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=64, dim=32):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.position_embedding = nn.Parameter(torch.randn(1, Tokenizer.model_max_length, dim) * 0.02)
        self.proj = nn.Linear(dim, dim)

    def forward(self, input_ids):
        h = self.token_embedding(input_ids) + self.position_embedding
        return (self.proj(torch.tanh(h)),)


class UNet(nn.Module):
    def __init__(self, in_channels=4, dim=32):
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, dim, 3, padding=1)
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.conv_out = nn.Conv2d(dim, in_channels, 3, padding=1)

    def forward(self, latents, encoder_hidden_states):
        b, _, h, w = latents.shape
        x = self.conv_in(latents).flatten(2).transpose(1, 2)
        q, k = self.to_q(x), self.to_k(encoder_hidden_states)
        cross = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        self_attn = (q @ q.transpose(1, 2)).softmax(-1)
        x = x + cross.softmax(-1) @ self.to_v(encoder_hidden_states)
        out = self.conv_out(x.transpose(1, 2).reshape(b, -1, h, w))
        return out, cross, self_attn


class StableDiffusion(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokenizer = Tokenizer()
        self.text_encoder = TextEncoder()
        self.unet = UNet()
        for param in self.unet.parameters():
            param.requires_grad = False
        self.unet.eval()

    def get_text_embeds(self, prompt, negative_prompt):
        text_embeddings = self.text_encoder(self.tokenizer(prompt))[0]
        uncond_embeddings = self.text_encoder(self.tokenizer(negative_prompt))[0]
        return uncond_embeddings, text_embeddings

    def train_step(self, text_embeddings, image, token_ids, attention_output_size):
        latents = F.avg_pool2d(image, 2).repeat(1, 2, 1, 1)[:, :4]
        noise = torch.randn_like(latents)
        latents_noisy = latents * 0.9 + noise * 0.1
        noise_pred, cross, self_attn = self.unet(torch.cat([latents_noisy] * 2), text_embeddings)
        side = int(math.sqrt(cross.shape[1]))
        cross = cross[1, :, token_ids].T.reshape(len(token_ids), side, side)
        cross = F.interpolate(cross[None], attention_output_size, mode="bilinear")[0]
        self_attn = self_attn[1].reshape(side * side, side, side)
        sd_loss = F.mse_loss(noise_pred.chunk(2)[1], noise)
        return sd_loss, cross, self_attn


class Slime:
    def __init__(self, config):
        self.config = config
        self.stable_diffusion = StableDiffusion()
        self.num_parts = len(self.config.part_names)
        self.prepare_text_embeddings()
        del self.stable_diffusion.tokenizer
        del self.stable_diffusion.text_encoder

        self.embeddings_to_optimize = []
        if self.config.train:
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

    def training_step(self, batch):
        image, mask = batch
        text_embedding = torch.cat(
            [
                self.text_embedding[:, 0:1],
                *self.embeddings_to_optimize,
                self.text_embedding[:, 1 + len(self.embeddings_to_optimize) :],
            ],
            dim=1,
        )
        t_embedding = torch.cat([self.uncond_embedding, text_embedding])
        sd_loss, cross_attention_maps, self_attention_maps = self.stable_diffusion.train_step(
            t_embedding, image, self.token_ids, self.config.train_mask_size
        )
        loss1 = F.cross_entropy(cross_attention_maps[None], mask[None])
        small = F.interpolate(cross_attention_maps.softmax(0)[None], self_attention_maps.shape[-1], mode="bilinear")[0]
        self_attention_map = (self_attention_maps[None] * small.flatten(1, 2)[..., None, None]).sum(1)
        one_shot_mask = F.one_hot(F.interpolate(mask[None, None].float(), self_attention_map.shape[-1]).long()[0, 0],
                                  self.num_parts).permute(2, 0, 1).float()
        loss2 = F.mse_loss(self_attention_map, one_shot_mask) * self.num_parts
        return loss1 + self.config.sd_loss_coef * sd_loss + self.config.self_attention_loss_coef * loss2

    def configure_optimizers(self):
        parameters = [{"params": self.embeddings_to_optimize, "lr": self.config.lr}]
        optimizer = getattr(optim, self.config.optimizer)(parameters, lr=self.config.lr)  # raises
        return optimizer


def make_dataset(num_parts, size=16, n=4):
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(n):
        image = torch.rand(1, 3, size, size, generator=g)
        mask = torch.zeros(size, size, dtype=torch.long)
        for p in range(1, num_parts):
            mask[(p - 1) * size // (num_parts - 1): p * size // (num_parts - 1), size // 4: 3 * size // 4] = p
        data.append((image, mask))
    return data


def main():
    torch.manual_seed(0)
    config = get_args()
    model = Slime(config)
    optimizer = model.configure_optimizers()
    dataset = make_dataset(model.num_parts, config.train_mask_size)
    for epoch in range(config.epochs):
        for batch in dataset:
            loss = model.training_step(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
