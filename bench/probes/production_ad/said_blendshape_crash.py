# expect: inplace_version
# source: https://github.com/yunik1004/SAiD/issues/8
"""Speech-driven 3D facial animation with a blendshape latent diffusion model.

SAiD-style training script: an audio encoder (stand-in for wav2vec2) produces
frame-aligned conditioning, a 1D denoiser predicts the noise added to ARKit-like
blendshape coefficient sequences, and an optional vertex-space loss projects
predictions through per-identity blendshape deltas of a face mesh.  Includes
classifier-free guidance dropout, an EMA copy of the weights, a warmup
scheduler, a small Accelerator wrapper and a validation epoch.  Synthetic data.
"""
import argparse
import copy
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
import torch.nn.functional as F


@dataclass
class LossStepOutput:
    predict: torch.FloatTensor
    velocity: torch.FloatTensor
    vertex: Optional[torch.FloatTensor]


@dataclass
class LossEpochOutput:
    total: float = 0
    predict: float = 0
    velocity: float = 0
    vertex: float = 0
    lr: Optional[float] = None


@dataclass
class DataBatch:
    waveform: list
    blendshape_coeffs: torch.FloatTensor
    cond: torch.BoolTensor
    blendshape_delta: Optional[torch.FloatTensor]


class AudioEncoder(nn.Module):
    """Tiny convolutional stand-in for the wav2vec2 feature extractor."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(1, hidden, 10, stride=5), nn.GELU(),
                                  nn.Conv1d(hidden, hidden, 4, stride=2), nn.GELU())

    def forward(self, audio, num_frames):
        feats = self.conv(audio.unsqueeze(1))
        feats = F.interpolate(feats, size=num_frames, mode="linear", align_corners=False)
        return feats.transpose(1, 2)


class Denoiser1D(nn.Module):
    def __init__(self, x_dim: int, hidden: int = 48, cond_dim: int = 32, num_steps: int = 50):
        super().__init__()
        self.time_emb = nn.Embedding(num_steps, hidden)
        self.in_conv = nn.Conv1d(x_dim, hidden, 3, padding=1)
        self.cond_proj = nn.Linear(cond_dim, hidden)
        self.attn = nn.MultiheadAttention(hidden, 4, batch_first=True)
        self.mid = nn.Conv1d(hidden, hidden, 3, padding=1)
        self.out_conv = nn.Conv1d(hidden, x_dim, 3, padding=1)

    def forward(self, x, t, cond):
        h = self.in_conv(x.transpose(1, 2)) + self.time_emb(t).unsqueeze(-1)
        c = self.cond_proj(cond)
        a, _ = self.attn(h.transpose(1, 2), c, c)
        h = F.silu(self.mid((h.transpose(1, 2) + a).transpose(1, 2)))
        out = torch.tanh(self.out_conv(h))
        return out.transpose(1, 2)


class SAID(nn.Module):
    def __init__(self, x_dim: int = 32, num_steps: int = 50, latent_scale: float = 1.0):
        super().__init__()
        self.audio_encoder = AudioEncoder()
        self.denoiser = Denoiser1D(x_dim, num_steps=num_steps)
        self.null_cond_emb = nn.Parameter(torch.zeros(1, 1, 32))
        self.latent_scale = latent_scale
        self.num_steps = num_steps
        betas = torch.linspace(1e-4, 0.02, num_steps)
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - betas, 0))

    def process_audio(self, waveform):
        return torch.stack([(w - w.mean()) / (w.std() + 1e-7) for w in waveform])

    def get_audio_embedding(self, waveform_processed, num_frames):
        return self.audio_encoder(waveform_processed, num_frames)

    def get_random_timesteps(self, batch_size):
        return torch.randint(0, self.num_steps, (batch_size,))

    def encode_samples(self, samples):
        return samples

    def add_noise(self, sample, timesteps):
        noise = torch.randn_like(sample)
        a = self.alphas_cumprod[timesteps].view(-1, 1, 1)
        noisy = a.sqrt() * sample + (1 - a).sqrt() * noise
        velocity = a.sqrt() * noise - (1 - a).sqrt() * sample
        return argparse.Namespace(noisy_sample=noisy, noise=noise, velocity=velocity)

    def forward(self, noisy_samples, timesteps, audio_embedding):
        return self.denoiser(noisy_samples, timesteps, audio_embedding)


class Accelerator:
    """Minimal subset of accelerate.Accelerator used by the training loop."""

    def __init__(self, gradient_accumulation_steps: int = 1):
        self.device = torch.device("cpu")
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.sync_gradients = True

    def backward(self, loss):
        loss = loss / self.gradient_accumulation_steps
        loss.backward()  # raises

    def clip_grad_norm_(self, params, max_norm):
        torch.nn.utils.clip_grad_norm_(params, max_norm)


class EMAModel:
    def __init__(self, parameters, decay: float = 0.999):
        self.decay = decay
        self.shadow = [p.detach().clone() for p in parameters]

    @torch.no_grad()
    def step(self, parameters):
        for s, p in zip(self.shadow, parameters):
            s.mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)


def random_noise_loss(said_model, data, std, device, prediction_type="epsilon"):
    waveform = data.waveform
    blendshape_coeffs = data.blendshape_coeffs.to(device)
    cond = data.cond.to(device)

    coeff_latents = said_model.encode_samples(blendshape_coeffs * said_model.latent_scale)
    curr_batch_size = len(waveform)
    window_size = blendshape_coeffs.shape[1]

    waveform_processed = said_model.process_audio(waveform).to(device)
    random_timesteps = said_model.get_random_timesteps(curr_batch_size).to(device)
    cond_embedding = said_model.get_audio_embedding(waveform_processed, window_size)
    uncond_embedding = said_model.null_cond_emb.repeat(curr_batch_size, cond_embedding.shape[1], 1)
    cond_mask = cond.view(-1, 1, 1)
    audio_embedding = cond_embedding * cond_mask + uncond_embedding * torch.logical_not(cond_mask)

    noise_dict = said_model.add_noise(coeff_latents, random_timesteps)
    pred = said_model(noise_dict.noisy_sample, random_timesteps, audio_embedding)

    answer = {"epsilon": noise_dict.noise, "sample": coeff_latents,
              "v_prediction": noise_dict.velocity}[prediction_type]

    criterion_pred, criterion_velocity, criterion_vertex = nn.L1Loss(), nn.L1Loss(), nn.L1Loss()

    answer_reweight = answer
    pred_reweight = pred
    if std is not None:
        answer_reweight /= std.view(1, 1, -1)
        pred_reweight /= std.view(1, 1, -1)

    loss_pred = criterion_pred(pred_reweight, answer_reweight)
    answer_diff = answer_reweight[:, 1:, :] - answer_reweight[:, :-1, :]
    pred_diff = pred_reweight[:, 1:, :] - pred_reweight[:, :-1, :]
    loss_vel = criterion_velocity(pred_diff, answer_diff)

    loss_vertex = None
    if data.blendshape_delta is not None:
        blendshape_delta = data.blendshape_delta.to(device)
        b, k, v, i = blendshape_delta.shape
        norm = torch.norm(blendshape_delta, p=1, dim=[1, 2, 3]) / (k * v * i)
        delta_normalized = torch.div(blendshape_delta, norm.view(-1, 1, 1, 1))
        be_answer = torch.bmm(answer, delta_normalized.view(b, k, v * i))
        be_pred = torch.bmm(pred, delta_normalized.view(b, k, v * i))
        loss_vertex = criterion_vertex(be_pred, be_answer)

    return LossStepOutput(predict=loss_pred, velocity=loss_vel, vertex=loss_vertex)


def train_epoch(said_model, batches, optimizer, lr_scheduler, accelerator, std,
                weight_vel, weight_vertex, prediction_type="epsilon", ema_model=None):
    device = accelerator.device
    if std is not None:
        std = std.to(device)
    said_model.train()
    totals = {"loss": 0.0, "predict": 0.0, "velocity": 0.0, "vertex": 0.0}
    total_num = 0
    for data in batches:
        curr_batch_size = len(data.waveform)
        losses = random_noise_loss(said_model, data, std, device, prediction_type)
        loss = losses.predict + weight_vel * losses.velocity
        if losses.vertex is not None:
            loss += weight_vertex * losses.vertex
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(said_model.parameters(), 1.0)
        optimizer.step()
        if ema_model:
            ema_model.step(said_model.parameters())
        lr_scheduler.step()
        optimizer.zero_grad()

        totals["loss"] += loss.item() * curr_batch_size
        totals["predict"] += losses.predict.item() * curr_batch_size
        totals["velocity"] += losses.velocity.item() * curr_batch_size
        if losses.vertex is not None:
            totals["vertex"] += losses.vertex.item() * curr_batch_size
        total_num += curr_batch_size
    return LossEpochOutput(total=totals["loss"] / total_num, predict=totals["predict"] / total_num,
                           velocity=totals["velocity"] / total_num, vertex=totals["vertex"] / total_num,
                           lr=lr_scheduler.get_last_lr()[0])


def validate_epoch(said_model, batches, accelerator, std, weight_vel, weight_vertex,
                   prediction_type="epsilon"):
    said_model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for data in batches:
            losses = random_noise_loss(said_model, data, std, accelerator.device, prediction_type)
            loss = losses.predict + weight_vel * losses.velocity
            if losses.vertex is not None:
                loss += weight_vertex * losses.vertex
            total += loss.item() * len(data.waveform)
            n += len(data.waveform)
    return LossEpochOutput(total=total / n)


def make_batches(num_batches, batch_size, window, x_dim, num_vertices, seed):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        coeffs = torch.rand(batch_size, window, x_dim, generator=g)
        waveform = [torch.randn(window * 40, generator=g) for _ in range(batch_size)]
        cond = torch.rand(batch_size, generator=g) > 0.1
        delta = 0.01 * torch.randn(batch_size, x_dim, num_vertices, 3, generator=g)
        batches.append(DataBatch(waveform, coeffs, cond, delta))
    return batches


def main():
    parser = argparse.ArgumentParser(description="Train the SAID_UNet1D model")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--weight_vel", type=float, default=1.0)
    parser.add_argument("--weight_vertex", type=float, default=0.02)
    parser.add_argument("--prediction_type", type=str, default="epsilon")
    parser.add_argument("--no_coeffs_std", action="store_true")
    parser.add_argument("--ema", action="store_true")
    args = parser.parse_args([])

    torch.manual_seed(0)
    x_dim, window = 32, 24
    said_model = SAID(x_dim=x_dim)
    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(said_model.parameters(), lr=args.learning_rate)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
    ema_model = EMAModel(said_model.parameters()) if args.ema else None

    # per-coefficient std of the training set (coeffs_std.csv in the original recipe)
    std = 0.2 + 0.1 * torch.rand(1, x_dim) if not args.no_coeffs_std else None

    train_batches = make_batches(3, 4, window, x_dim, num_vertices=20, seed=1)
    val_batches = make_batches(1, 4, window, x_dim, num_vertices=20, seed=2)
    for epoch in range(args.epochs):
        train_out = train_epoch(said_model, train_batches, optimizer, lr_scheduler, accelerator,
                                std, args.weight_vel, args.weight_vertex, args.prediction_type,
                                ema_model)
        val_out = validate_epoch(said_model, val_batches, accelerator, std, args.weight_vel,
                                 args.weight_vertex, args.prediction_type)
        print(f"epoch {epoch}: train {train_out.total:.4f} val {val_out.total:.4f} lr {train_out.lr:.2e}")
    _ = copy.deepcopy(said_model.state_dict())


if __name__ == "__main__":
    main()
