# expect: clean
# source: https://github.com/huggingface/diffusers/issues/3256
"""Textual-inversion style fine-tuning of a placeholder token (diffusers example layout).

A small CLIP-like text encoder conditions a tiny cross-attention denoiser on prompts such as
"a photo of a <cat-toy>". The placeholder token's embedding is produced by a trainable
mapping network (MyFunction) from a learnable code vector; text encoder, VAE encoder and UNet
stay frozen. Includes a DDPM noise scheduler, LR warm-up scheduler, validation sampling and
progress saving, all on synthetic data.
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

imagenet_templates_small = ["a photo of a {}", "a rendering of a {}", "a cropped photo of the {}",
                            "the photo of a {}", "a close-up photo of a {}", "a bright photo of the {}"]


def parse_args(input_args=None):
    parser = argparse.ArgumentParser(description="Simple example of a textual inversion training script.")
    parser.add_argument("--placeholder_token", type=str, default="<cat-toy>")
    parser.add_argument("--initializer_token", type=str, default="toy")
    parser.add_argument("--resolution", type=int, default=16)
    parser.add_argument("--train_batch_size", type=int, default=4)
    parser.add_argument("--max_train_steps", type=int, default=12)
    parser.add_argument("--learning_rate", type=float, default=5e-3)
    parser.add_argument("--lr_warmup_steps", type=int, default=3)
    parser.add_argument("--code_dim", type=int, default=8)
    parser.add_argument("--validation_steps", type=int, default=6)
    parser.add_argument("--num_inference_steps", type=int, default=4)
    parser.add_argument("--save_steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(input_args)


class SimpleTokenizer:
    def __init__(self, words, model_max_length=8):
        self.vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2}
        for w in words:
            self.vocab.setdefault(w, len(self.vocab))
        self.model_max_length = model_max_length

    def __len__(self):
        return len(self.vocab)

    def add_tokens(self, token):
        if token in self.vocab:
            return 0
        self.vocab[token] = len(self.vocab)
        return 1

    def convert_tokens_to_ids(self, token):
        return self.vocab[token]

    def __call__(self, text):
        ids = [1] + [self.vocab.get(w, 0) for w in text.lower().split()] + [2]
        ids = ids[:self.model_max_length] + [0] * max(0, self.model_max_length - len(ids))
        return torch.tensor(ids)


class CLIPTextEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_positions):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, hidden_size)
        self.position_embedding = nn.Embedding(max_positions, hidden_size)
        self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0))

    def forward(self, input_ids=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.token_embedding(input_ids)
        return inputs_embeds + self.position_embedding(self.position_ids[:, :inputs_embeds.shape[1]])


class CLIPTextModel(nn.Module):
    def __init__(self, vocab_size, hidden_size=32, max_positions=8, layers=2):
        super().__init__()
        self.text_model = nn.Module()
        self.text_model.embeddings = CLIPTextEmbeddings(vocab_size, hidden_size, max_positions)
        self.text_model.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(hidden_size, 4, 64, dropout=0.0, batch_first=True), layers)
        self.text_model.final_layer_norm = nn.LayerNorm(hidden_size)

    def get_input_embeddings(self):
        return self.text_model.embeddings.token_embedding

    def resize_token_embeddings(self, new_num_tokens):
        old = self.text_model.embeddings.token_embedding
        new = nn.Embedding(new_num_tokens, old.embedding_dim)
        with torch.no_grad():
            new.weight[:old.num_embeddings] = old.weight
        self.text_model.embeddings.token_embedding = new

    def forward(self, input_ids=None, inputs_embeds=None):
        h = self.text_model.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)
        return (self.text_model.final_layer_norm(self.text_model.encoder(h)),)


class TinyUNet(nn.Module):
    """Conv denoiser with timestep embedding and one cross-attention block."""

    def __init__(self, channels=4, width=32, cross_dim=32):
        super().__init__()
        self.conv_in = nn.Conv2d(channels, width, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(16, width), nn.SiLU(), nn.Linear(width, width))
        self.attn = nn.MultiheadAttention(width, 4, kdim=cross_dim, vdim=cross_dim, batch_first=True)
        self.conv_out = nn.Conv2d(width, channels, 3, padding=1)

    @staticmethod
    def timestep_embedding(t, dim=16):
        freqs = torch.exp(-math.log(10000) * torch.arange(dim // 2) / (dim // 2))
        args = t.float()[:, None] * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, sample, timesteps, encoder_hidden_states):
        h = F.silu(self.conv_in(sample)) + self.time_mlp(self.timestep_embedding(timesteps))[:, :, None, None]
        b, c, hh, ww = h.shape
        seq = h.flatten(2).transpose(1, 2)
        seq = seq + self.attn(seq, encoder_hidden_states, encoder_hidden_states)[0]
        return self.conv_out(seq.transpose(1, 2).reshape(b, c, hh, ww))


class DDPMScheduler:
    def __init__(self, num_train_timesteps=100, beta_start=1e-4, beta_end=0.02):
        self.num_train_timesteps = num_train_timesteps
        self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - self.betas, dim=0)

    def add_noise(self, original, noise, timesteps):
        a = self.alphas_cumprod[timesteps].sqrt()[:, None, None, None]
        s = (1 - self.alphas_cumprod[timesteps]).sqrt()[:, None, None, None]
        return a * original + s * noise

    def step(self, model_output, t, sample):
        a_t = self.alphas_cumprod[t]
        pred_x0 = (sample - (1 - a_t).sqrt() * model_output) / a_t.sqrt()
        return pred_x0.clamp(-3, 3)


class MyFunction(nn.Module):
    """Maps a learnable code vector to a token embedding."""

    def __init__(self, code_dim, hidden_size, init_embedding):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(code_dim, 64), nn.GELU(), nn.Linear(64, hidden_size))
        self.register_buffer("init_embedding", init_embedding.clone())

    def forward(self, code):
        return self.init_embedding + self.net(code)


class TextualInversionDataset(torch.utils.data.Dataset):
    def __init__(self, tokenizer, placeholder_token, size, repeats=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.rand(4, 3, size, size, generator=g) * 2 - 1
        self.tokenizer, self.placeholder_token, self.repeats = tokenizer, placeholder_token, repeats

    def __len__(self):
        return len(self.images) * self.repeats

    def __getitem__(self, i):
        text = random.choice(imagenet_templates_small).format(self.placeholder_token)
        return {"input_ids": self.tokenizer(text), "pixel_values": self.images[i % len(self.images)]}


def get_constant_schedule_with_warmup(optimizer, num_warmup_steps):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, float(step + 1) / max(1, num_warmup_steps)))


def freeze_params(params):
    for param in params:
        param.requires_grad = False


def apply_mapped_embedding(text_encoder, mapper, code, input_ids, placeholder_token_id):
    inputs_embeds = text_encoder.get_input_embeddings()(input_ids)
    mask = (input_ids == placeholder_token_id).unsqueeze(-1)
    return torch.where(mask, mapper(code).expand_as(inputs_embeds), inputs_embeds)


def encode_prompt(text_encoder, mapper, code, input_ids, placeholder_token_id):
    inputs_embeds = apply_mapped_embedding(text_encoder, mapper, code, input_ids, placeholder_token_id)
    return text_encoder(inputs_embeds=inputs_embeds)[0]


@torch.no_grad()
def log_validation(text_encoder, unet, vae_encoder, tokenizer, mapper, code, noise_scheduler, args,
                   placeholder_token_id, step):
    ids = tokenizer(f"a photo of a {args.placeholder_token}")[None]
    hidden = encode_prompt(text_encoder, mapper, code, ids, placeholder_token_id)
    latents = torch.randn(1, 4, args.resolution // 2, args.resolution // 2)
    for t in torch.linspace(noise_scheduler.num_train_timesteps - 1, 0, args.num_inference_steps).long():
        pred = unet(latents, t[None], hidden)
        latents = noise_scheduler.add_noise(noise_scheduler.step(pred, t, latents), torch.randn_like(latents),
                                            (t[None] // 2))
    print(f"step {step}: validation latent std {latents.std().item():.4f}")


def save_progress(mapper, code, placeholder_token, store):
    store[placeholder_token] = {"code": code.detach().clone(),
                                "mapper": {k: v.detach().clone() for k, v in mapper.state_dict().items()}}


def main():
    args = parse_args([])
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    words = " ".join(imagenet_templates_small).replace("{}", "").split() + [args.initializer_token]
    tokenizer = SimpleTokenizer(words)
    if tokenizer.add_tokens(args.placeholder_token) == 0:
        raise ValueError(f"The tokenizer already contains the token {args.placeholder_token}.")
    initializer_token_id = tokenizer.convert_tokens_to_ids(args.initializer_token)
    placeholder_token_id = tokenizer.convert_tokens_to_ids(args.placeholder_token)

    text_encoder = CLIPTextModel(len(tokenizer) - 1)
    text_encoder.resize_token_embeddings(len(tokenizer))
    vae_encoder = nn.Conv2d(3, 4, 2, stride=2)
    unet = TinyUNet()
    noise_scheduler = DDPMScheduler()

    token_embeds = text_encoder.get_input_embeddings().weight.data
    token_embeds[placeholder_token_id] = token_embeds[initializer_token_id]

    # Freeze vae and unet
    freeze_params(vae_encoder.parameters())
    freeze_params(unet.parameters())
    # Freeze all parameters except for the token embeddings in text encoder
    freeze_params(text_encoder.text_model.encoder.parameters())
    freeze_params(text_encoder.text_model.final_layer_norm.parameters())
    freeze_params(text_encoder.text_model.embeddings.position_embedding.parameters())

    mapper = MyFunction(args.code_dim, token_embeds.shape[1], token_embeds[initializer_token_id])
    code = nn.Parameter(torch.zeros(args.code_dim))
    optimizer = torch.optim.AdamW([{"params": mapper.parameters()}, {"params": [code]}], lr=args.learning_rate)
    lr_scheduler = get_constant_schedule_with_warmup(optimizer, args.lr_warmup_steps)

    dataset = TextualInversionDataset(tokenizer, args.placeholder_token, args.resolution, seed=args.seed)
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=args.train_batch_size, shuffle=True)
    store, global_step = {}, 0
    text_encoder.train()
    unet.eval()
    while global_step < args.max_train_steps:
        for batch in dataloader:
            latents = vae_encoder(batch["pixel_values"]).detach() * 0.18215
            noise = torch.randn_like(latents)
            timesteps = torch.randint(0, noise_scheduler.num_train_timesteps, (latents.shape[0],)).long()
            noisy_latents = noise_scheduler.add_noise(latents, noise, timesteps)
            encoder_hidden_states = encode_prompt(text_encoder, mapper, code, batch["input_ids"],
                                                  placeholder_token_id)
            noise_pred = unet(noisy_latents, timesteps, encoder_hidden_states)
            loss = F.mse_loss(noise_pred, noise, reduction="none").mean([1, 2, 3]).mean()
            loss.backward()
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            text_encoder.get_input_embeddings().weight.grad = None

            global_step += 1
            if global_step % args.save_steps == 0:
                save_progress(mapper, code, args.placeholder_token, store)
            if global_step % args.validation_steps == 0:
                log_validation(text_encoder, unet, vae_encoder, tokenizer, mapper, code, noise_scheduler, args,
                               placeholder_token_id, global_step)
            print(f"step {global_step} loss {loss.item():.4f} lr {lr_scheduler.get_last_lr()[0]:.5f}")
            if global_step >= args.max_train_steps:
                break
    print("saved tokens:", list(store))


if __name__ == "__main__":
    main()
