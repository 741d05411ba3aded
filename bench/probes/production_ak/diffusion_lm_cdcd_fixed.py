# expect: clean
# source: https://github.com/thorinf/simple-diffusion-lm/issues/2
"""Continuous diffusion language model (CDCD-style) trained on token embeddings.

Follows the layout of simple-diffusion-lm's train.py: a Collate that pads/crops token ids, a
transformer estimator whose layers are modulated by a learned-sinusoidal time embedding, a
`Diffusion` helper (cosine gamma schedule, forward diffusion, self-conditioning, DDIM/DDPM reverse
steps), the `DiffusionLM` wrapper (embeddings, interpolation through the LM head, masked MSE +
reconstruction cross-entropy), a Lion optimizer, linear warm-up/decay, an EMA copy used for
sampling, gradient accumulation, and a train() entry point.  Random token ids replace the corpus.
"""
import argparse
import copy
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class Collate:
    def __init__(self, crop_length=-1, eos_id=-1, pad_id=-1):
        self.crop_length, self.eos_id, self.pad_id = crop_length, eos_id, pad_id

    def __call__(self, batch):
        ids_end = [self.eos_id] if self.eos_id >= 0 else []
        ids_list = [torch.tensor(ids + ids_end, dtype=torch.int64) for ids in batch]
        ids = nn.utils.rnn.pad_sequence(ids_list, batch_first=True, padding_value=self.pad_id)
        lengths = torch.tensor([x.shape[0] for x in ids_list])
        if 0 < self.crop_length < ids.shape[1]:
            ids = ids[:, :self.crop_length]
            lengths = torch.minimum(lengths, torch.tensor(self.crop_length))
        return ids, lengths


class TransformerEncoderLayer(nn.Module):
    def __init__(self, dim, hidden_dim, num_heads=4, drop_prob=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.attention = nn.MultiheadAttention(dim, num_heads, bias=False, batch_first=True)
        self.dropout1 = nn.Dropout(p=drop_prob)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.ffn = nn.Sequential(nn.Linear(dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))
        self.dropout2 = nn.Dropout(p=drop_prob)

    def forward(self, x, key_padding_mask, gammas=(0.0, 0.0), betas=(0.0, 0.0)):
        res = x
        x = (gammas[0] * self.norm1(x)) + betas[0]
        x, _ = self.attention(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = res + self.dropout1(x)
        res = x
        x = (gammas[1] * self.norm2(x)) + betas[1]
        return res + self.dropout2(self.ffn(x))


class LearnedSinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weights = nn.Parameter(torch.randn(dim // 2))

    def forward(self, x):
        freq = torch.einsum("b,d->bd", x, self.weights) * 2 * math.pi
        return torch.cat([x.unsqueeze(-1), freq.sin(), freq.cos()], dim=-1)


class TransformerModel(nn.Module):
    def __init__(self, input_dim, target_dim, model_dim, num_layers=2, learned_sinusoidal_dim=16, dropout_prob=0.0):
        super().__init__()
        self.model_dim, self.num_layers = model_dim, num_layers
        self.time_mlp = nn.Sequential(
            LearnedSinusoidalPosEmb(learned_sinusoidal_dim), nn.Linear(learned_sinusoidal_dim + 1, 32), nn.GELU(),
            nn.Linear(32, num_layers * 4 * model_dim), nn.GELU())
        self.project = nn.Sequential(nn.Linear(input_dim, model_dim), nn.Dropout(p=dropout_prob))
        self.encoder_layers = nn.ModuleList(
            TransformerEncoderLayer(model_dim, 4 * model_dim, drop_prob=dropout_prob) for _ in range(num_layers))
        self.out = nn.Linear(model_dim, target_dim)

    def forward(self, x, t, length_mask=None):
        time_emb = self.time_mlp(t)
        x = self.project(x)
        padding = None
        if length_mask is not None:
            x = x * length_mask.unsqueeze(-1)
            padding = ~length_mask
        scaling_weights = time_emb.view(-1, self.num_layers * 4, self.model_dim).split(1, dim=1)
        for i, layer in enumerate(self.encoder_layers):
            gammas = scaling_weights[4 * i], scaling_weights[4 * i + 1]
            betas = scaling_weights[4 * i + 2], scaling_weights[4 * i + 3]
            x = layer(x, padding, gammas=gammas, betas=betas)
        return self.out(x), x


class Diffusion:
    def __init__(self, estimator, interpolate=None, self_conditioning=True, sampling_method="ddim"):
        self.estimator, self.interpolate = estimator, interpolate
        self.self_conditioning, self.sampling_method = self_conditioning, sampling_method

    def gamma(self, t, ns=0.0002, ds=0.00025):
        return torch.cos(((t + ns) / (1 + ds)) * math.pi / 2) ** 2

    def forward_diffusion(self, x_0, t):
        time = t.unsqueeze(1).unsqueeze(1)
        z = torch.randn_like(x_0)
        return torch.sqrt(self.gamma(time)) * x_0 + z * torch.sqrt(1 - self.gamma(time))

    def ddim_step(self, x_t, x_0_estimation, t_now, t_next):
        gamma_now = self.gamma(t_now).unsqueeze(1).unsqueeze(1)
        gamma_next = self.gamma(t_next).unsqueeze(1).unsqueeze(1)
        eps = torch.rsqrt(1 - gamma_now) * (x_t - torch.sqrt(gamma_now) * x_0_estimation)
        return torch.sqrt(gamma_next) * x_0_estimation + torch.sqrt(1 - gamma_next) * eps

    @torch.no_grad()
    def reverse_diffusion(self, x_T, steps):
        x_t, x_estimation = x_T, torch.zeros_like(x_T)
        for step in range(steps):
            t_now = torch.tensor(1 - step / steps).repeat(x_T.shape[0])
            t_next = torch.tensor(max(1 - (step + 1) / steps, 0)).repeat(x_T.shape[0])
            x_estimation, latent = self.estimator(torch.cat([x_t, torch.zeros_like(x_t), x_estimation], dim=-1), t_now)
            if self.interpolate is not None:
                x_estimation = self.interpolate(latent)
            x_t = self.ddim_step(x_t, x_estimation, t_now, t_next)
        _, latent = self.estimator(torch.cat([x_t, torch.zeros_like(x_t), x_estimation], dim=-1), torch.zeros(x_T.shape[0]))
        return x_t, latent

    def compute_loss(self, x_0, len_mask, cond_mask, offset=1e-5):
        t = torch.rand(x_0.shape[0]).clamp(offset, 1.0 - offset)
        x_t = self.forward_diffusion(x_0, t)
        x_noised = x_t.masked_fill(cond_mask.unsqueeze(-1), 0.0)
        x_cond = x_t.masked_fill(~cond_mask.unsqueeze(-1), 0.0)
        x_estimation = torch.zeros_like(x_t)
        if self.self_conditioning and random.uniform(0, 1) < 0.5:
            with torch.no_grad():
                x_estimation, latent = self.estimator(torch.cat([x_noised, x_cond, x_estimation], dim=-1), t, len_mask)
                if self.interpolate is not None:
                    x_estimation = self.interpolate(latent)
                x_estimation = x_estimation.masked_fill(cond_mask.unsqueeze(-1), 0.0).detach()
        x_0_estimation, latent = self.estimator(torch.cat([x_noised, x_cond, x_estimation], dim=-1), t, len_mask)
        return (x_0 - x_0_estimation) ** 2.0, x_0_estimation, latent


class DiffusionLM(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, model_dim, num_layers, dropout_prob):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.embedding_grad_scale = 1.0
        self.interpolate_temperature = 1.0
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)
        nn.init.normal_(self.embedding.weight, std=0.1)
        self.norm = nn.LayerNorm(embedding_dim)
        self.estimator = TransformerModel(embedding_dim * 3, embedding_dim, model_dim, num_layers, dropout_prob=dropout_prob)
        self.diffusion = Diffusion(self.estimator, interpolate=self.interpolate)
        self.dropout = nn.Dropout(p=dropout_prob)
        self.lm_head = nn.Linear(model_dim, num_embeddings)
        self.loss_ce = nn.CrossEntropyLoss(reduction="none")

    def get_embeddings(self, ids):
        return self.norm(self.embedding(ids))

    def get_logits(self, x):
        return self.lm_head(self.dropout(x))

    def interpolate(self, x):
        weights = (self.get_logits(x) / self.interpolate_temperature).softmax(dim=-1)
        return torch.einsum("nle,ed->nld", weights, self.norm(self.embedding.weight))

    def compute_loss(self, ids, lengths):
        x = self.get_embeddings(ids)
        x = self.embedding_grad_scale * x + (1.0 - self.embedding_grad_scale) * x.detach()
        len_mask = torch.arange(ids.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        cond_mask = torch.rand(ids.shape) < 0.1
        diff_mask = torch.logical_and(len_mask, torch.logical_not(cond_mask))
        num_elems = diff_mask.sum()
        loss_diff, x_0_estimation, latent = self.diffusion.compute_loss(x, len_mask, cond_mask)
        loss_diff = loss_diff[diff_mask].mean(-1)
        logits = self.get_logits(latent)
        ids = ids.masked_fill(torch.logical_not(diff_mask), -100)
        loss_reconstruction = self.loss_ce(logits.transpose(2, 1), ids)
        accuracy = (logits.argmax(dim=-1) == ids).float().sum() / num_elems
        loss_diff = loss_diff.mean()
        loss_reconstruction = loss_reconstruction.sum() / num_elems
        return loss_diff + loss_reconstruction, loss_diff, loss_reconstruction, accuracy

    @torch.no_grad()
    def forward(self, z, steps=10):
        _, latent = self.diffusion.reverse_diffusion(z, steps)
        return self.get_logits(latent).argmax(dim=-1)


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.mul(beta1).add(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)


class EMA:
    def __init__(self, model, beta=0.999, update_after_step=2):
        self.model, self.beta, self.update_after_step = model, beta, update_after_step
        self.ema_model = copy.deepcopy(model).eval()
        self.step = 0

    @torch.no_grad()
    def update(self):
        self.step += 1
        beta = 0.0 if self.step <= self.update_after_step else self.beta
        for p_ema, p in zip(self.ema_model.parameters(), self.model.parameters()):
            p_ema.lerp_(p, 1 - beta)

    def __call__(self, *args):
        return self.ema_model(*args)


def linear_decay_with_warmup(step, max_learning_rate, warmup_steps, hold_steps, decay_steps, min_learning_rate=1e-8):
    if step < warmup_steps:
        return max_learning_rate * (step / warmup_steps)
    if step < warmup_steps + hold_steps:
        return max_learning_rate
    scale = 1 - (step - warmup_steps - hold_steps) / decay_steps
    return max(max_learning_rate * scale, min_learning_rate)


def random_corpus(num_lines, vocab_size, generator):
    return [torch.randint(3, vocab_size, (int(torch.randint(6, 20, (1,), generator=generator)),),
                          generator=generator).tolist() for _ in range(num_lines)]


def train():
    parser = argparse.ArgumentParser()
    parser.add_argument("-ep", "--epochs", type=int, default=2)
    parser.add_argument("-b", "--batch_size", type=int, default=8)
    parser.add_argument("-lr", "--learning_rate", type=float, default=3e-4)
    parser.add_argument("-acc", "--accumulation_steps", type=int, default=2)
    parser.add_argument("-edim", "--embedding_dim", type=int, default=16)
    parser.add_argument("-mdim", "--model_dim", type=int, default=32)
    parser.add_argument("-numl", "--num_layers", type=int, default=2)
    parser.add_argument("-cl", "--crop_length", type=int, default=16)
    parser.add_argument("-v", "--vocab_size", type=int, default=50)
    args = parser.parse_args([])
    torch.manual_seed(0)
    random.seed(0)

    model = DiffusionLM(args.vocab_size, args.embedding_dim, args.model_dim, args.num_layers, dropout_prob=0.1)
    ema = EMA(model)
    optim = Lion(model.parameters(), lr=args.learning_rate, weight_decay=1e-4)
    collate = Collate(crop_length=args.crop_length, eos_id=1, pad_id=0)
    corpus = random_corpus(32, args.vocab_size, torch.Generator().manual_seed(0))
    batches = [collate(corpus[i:i + args.batch_size]) for i in range(0, len(corpus), args.batch_size)]
    num_updates = 0
    for ep in range(args.epochs):
        model.train()
        for idx, (ids, lengths) in enumerate(batches):
            loss, loss_diff, loss_reconstruction, accuracy = model.compute_loss(ids, lengths)
            (loss / args.accumulation_steps).backward()
            if (idx + 1) % args.accumulation_steps == 0 or idx + 1 == len(batches):
                optim.param_groups[0]["lr"] = linear_decay_with_warmup(num_updates, args.learning_rate, 2, 0, 20)
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optim.step()
                optim.zero_grad()
                ema.update()
                num_updates += 1
        print(f"epoch {ep}: loss {loss.item():.4f} mse {loss_diff.item():.4f} acc {accuracy.item():.3f}")
        with torch.no_grad():
            print(ema(torch.randn(2, args.crop_length, args.embedding_dim)).tolist()[0][:8])


if __name__ == "__main__":
    train()
