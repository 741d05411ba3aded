# expect: clean
# source: https://github.com/descriptinc/descript-audio-codec/issues/61
"""Descript-audio-codec style training script (no adversarial branch): a small
convolutional encoder/decoder with a residual vector quantizer (quantizer
dropout enabled) is trained on synthetic 16 kHz audio with a weighted sum of
multi-resolution spectral, waveform and VQ losses through an Accelerator-like
wrapper, with a metric tracker and periodic validation."""
import math
from dataclasses import dataclass
from typing import Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

CONFIG = {
    "seed": 0, "num_iters": 6, "valid_freq": 3, "batch_size": 4, "sample_rate": 16000,
    "duration": 0.128, "encoder_dim": 8, "latent_dim": 32, "n_codebooks": 4,
    "codebook_size": 64, "codebook_dim": 8, "quantizer_dropout": 0.5, "lr": 1e-4,
    "lambdas": {"mel/loss": 15.0, "waveform/loss": 1.0, "vq/commitment_loss": 0.25,
                "vq/codebook_loss": 1.0},
}


def WNConv1d(*args, **kwargs):
    return weight_norm(nn.Conv1d(*args, **kwargs))


class VectorQuantize(nn.Module):
    def __init__(self, input_dim: int, codebook_size: int, codebook_dim: int):
        super().__init__()
        self.in_proj = WNConv1d(input_dim, codebook_dim, kernel_size=1)
        self.out_proj = WNConv1d(codebook_dim, input_dim, kernel_size=1)
        self.codebook = nn.Embedding(codebook_size, codebook_dim)

    def forward(self, z):
        z_e = self.in_proj(z)
        z_q, indices = self.decode_latents(z_e)
        commitment_loss = F.mse_loss(z_e, z_q.detach(), reduction="none").mean([1, 2])
        codebook_loss = F.mse_loss(z_q, z_e.detach(), reduction="none").mean([1, 2])
        z_q = z_e + (z_q - z_e).detach()
        return self.out_proj(z_q), commitment_loss, codebook_loss, indices, z_e

    def decode_latents(self, latents):
        b, d, t = latents.shape
        encodings = F.normalize(latents.permute(0, 2, 1).reshape(b * t, d))
        codebook = F.normalize(self.codebook.weight)
        dist = (encodings.pow(2).sum(1, keepdim=True) - 2 * encodings @ codebook.t()
                + codebook.pow(2).sum(1, keepdim=True).t())
        indices = (-dist).max(1)[1].reshape(b, t)
        return self.codebook(indices).transpose(1, 2), indices


class ResidualVectorQuantize(nn.Module):
    def __init__(self, input_dim=512, n_codebooks=9, codebook_size=1024,
                 codebook_dim: Union[int, list] = 8, quantizer_dropout: float = 0.0):
        super().__init__()
        if isinstance(codebook_dim, int):
            codebook_dim = [codebook_dim for _ in range(n_codebooks)]
        self.n_codebooks = n_codebooks
        self.quantizers = nn.ModuleList(
            [VectorQuantize(input_dim, codebook_size, codebook_dim[i]) for i in range(n_codebooks)])
        self.quantizer_dropout = quantizer_dropout

    def forward(self, z, n_quantizers: int = None):
        z_q, residual = 0, z
        commitment_loss, codebook_loss = 0, 0
        codes = []
        if n_quantizers is None:
            n_quantizers = self.n_codebooks
        if self.training:
            n_quantizers = torch.ones((z.shape[0],)) * self.n_codebooks + 1
            dropout = torch.randint(1, self.n_codebooks + 1, (z.shape[0],))
            n_dropout = int(z.shape[0] * self.quantizer_dropout)
            n_quantizers[:n_dropout] = dropout[:n_dropout]
        for i, quantizer in enumerate(self.quantizers):
            if self.training is False and i >= n_quantizers:
                break
            z_q_i, commitment_loss_i, codebook_loss_i, indices_i, _ = quantizer(residual)
            mask = torch.full((z.shape[0],), fill_value=i, device=z.device) < n_quantizers
            z_q = z_q + z_q_i * mask[:, None, None]
            residual = residual - z_q_i
            # Sum losses
            commitment_loss += (commitment_loss_i * mask).mean()
            codebook_loss += (codebook_loss_i * mask).mean()
            codes.append(indices_i)
        return {"z": z_q, "codes": torch.stack(codes, 1),
                "vq/commitment_loss": commitment_loss, "vq/codebook_loss": codebook_loss}


class DAC(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, latent = cfg["encoder_dim"], cfg["latent_dim"]
        self.encoder = nn.Sequential(WNConv1d(1, d, 7, padding=3), nn.ELU(),
                                     WNConv1d(d, 2 * d, 8, stride=4, padding=2), nn.ELU(),
                                     WNConv1d(2 * d, latent, 8, stride=4, padding=2))
        self.quantizer = ResidualVectorQuantize(latent, cfg["n_codebooks"], cfg["codebook_size"],
                                                cfg["codebook_dim"], cfg["quantizer_dropout"])
        self.decoder = nn.Sequential(nn.ConvTranspose1d(latent, 2 * d, 8, stride=4, padding=2), nn.ELU(),
                                     nn.ConvTranspose1d(2 * d, d, 8, stride=4, padding=2), nn.ELU(),
                                     WNConv1d(d, 1, 7, padding=3), nn.Tanh())

    def forward(self, audio):
        out = self.quantizer(self.encoder(audio))
        out["audio"] = self.decoder(out["z"])[..., :audio.shape[-1]]
        return out


class MelSpectrogramLoss(nn.Module):
    def __init__(self, window_lengths=(64, 256)):
        super().__init__()
        self.window_lengths = window_lengths

    def forward(self, x, y):
        loss = 0.0
        for w in self.window_lengths:
            win = torch.hann_window(w)
            X = torch.stft(x.squeeze(1), w, w // 4, window=win, return_complex=True).abs()
            Y = torch.stft(y.squeeze(1), w, w // 4, window=win, return_complex=True).abs()
            loss = loss + F.l1_loss(torch.log10(X.clamp(1e-5)), torch.log10(Y.clamp(1e-5)))
        return loss


class Accelerator:
    def __init__(self, amp=False):
        self.amp = amp

    def prepare_model(self, model):
        return model

    def backward(self, loss):
        loss.backward()

    def step(self, optimizer):
        optimizer.step()


@dataclass
class State:
    generator: DAC
    optimizer_g: torch.optim.Optimizer
    mel_loss: MelSpectrogramLoss
    waveform_loss: nn.L1Loss


class Tracker:
    def __init__(self):
        self.history = {}

    def log(self, split, output):
        for k, v in output.items():
            if torch.is_tensor(v) and v.numel() == 1:
                self.history.setdefault(f"{split}/{k}", []).append(v.item())

    def summary(self, split):
        return {k: sum(v) / len(v) for k, v in self.history.items() if k.startswith(split)}


def make_batch(cfg, step):
    g = torch.Generator().manual_seed(1000 + step)
    n = int(cfg["sample_rate"] * cfg["duration"])
    t = torch.arange(n) / cfg["sample_rate"]
    f0 = 100 + 400 * torch.rand(cfg["batch_size"], 1, generator=g)
    audio = 0.5 * torch.sin(2 * math.pi * f0 * t) + 0.05 * torch.randn(cfg["batch_size"], n, generator=g)
    return audio.unsqueeze(1)


def train_loop(state, batch, accel, lambdas):
    state.generator.train()
    output = {}
    out = state.generator(batch)
    recons = out["audio"]
    output["mel/loss"] = state.mel_loss(recons, batch)
    output["waveform/loss"] = state.waveform_loss(recons, batch)
    output["vq/commitment_loss"] = out["vq/commitment_loss"]
    output["vq/codebook_loss"] = out["vq/codebook_loss"]
    output["loss"] = sum([v * output[k] for k, v in lambdas.items() if k in output])

    state.optimizer_g.zero_grad()
    accel.backward(output["loss"])
    accel.step(state.optimizer_g)
    return {k: v.detach() for k, v in sorted(output.items())}


@torch.no_grad()
def val_loop(state, batch):
    state.generator.eval()
    out = state.generator(batch)
    return {"mel/loss": state.mel_loss(out["audio"], batch)}


def train(cfg):
    torch.manual_seed(cfg["seed"])
    accel = Accelerator(amp=False)
    generator = accel.prepare_model(DAC(cfg))
    state = State(generator, torch.optim.AdamW(generator.parameters(), lr=cfg["lr"]),
                  MelSpectrogramLoss(), nn.L1Loss())
    tracker = Tracker()
    val_batch = make_batch(cfg, -1)
    for it in range(cfg["num_iters"]):
        tracker.log("train", train_loop(state, make_batch(cfg, it), accel, cfg["lambdas"]))
        if (it + 1) % cfg["valid_freq"] == 0:
            tracker.log("val", val_loop(state, val_batch))
            print("iter %d  train %s  val %s" % (it + 1, {k: round(v, 4) for k, v in tracker.summary("train").items()},
                                                 tracker.summary("val")))


if __name__ == "__main__":
    train(CONFIG)
