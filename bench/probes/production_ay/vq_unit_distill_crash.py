# expect: no_grad_fn
# source: https://github.com/lucidrains/vector-quantize-pytorch/issues/68
"""Speech-unit distillation with a predetermined (k-means) codebook.

A small convolutional feature encoder is trained so that its vector-quantized output matches
the frame features of a fixed "teacher" (HuBERT-style), using a `VectorQuantize` layer in the
style of lucidrains/vector-quantize-pytorch (EMA-updated `EuclideanCodebook` kept in buffers,
straight-through estimator, commitment loss). The codebook is initialised by k-means on the
teacher features and should stay fixed while the encoder is fine-tuned. Dataclass config,
warmup LR schedule, callbacks, periodic evaluation of unit accuracy. CPU, synthetic audio.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- vector quantizer
def l2norm(t):
    return F.normalize(t, p=2, dim=-1)


def ema_inplace(moving_avg, new, decay):
    moving_avg.data.mul_(decay).add_(new, alpha=(1 - decay))


def laplace_smoothing(x, n_categories, eps=1e-5):
    return (x + eps) / (x.sum() + n_categories * eps)


class EuclideanCodebook(nn.Module):
    def __init__(self, dim, codebook_size, decay=0.8, eps=1e-5, ema_update=True, learnable_codebook=False):
        super().__init__()
        self.decay, self.eps, self.codebook_size = decay, eps, codebook_size
        self.ema_update, self.learnable_codebook = ema_update, learnable_codebook
        embed = torch.randn(codebook_size, dim)
        self.register_buffer("initted", torch.Tensor([False]))
        self.register_buffer("cluster_size", torch.zeros(codebook_size))
        self.register_buffer("embed_avg", embed.clone())
        if learnable_codebook:
            self.embed = nn.Parameter(embed)
        else:
            self.register_buffer("embed", embed)

    @torch.jit.ignore
    def init_embed_(self, data):
        self.embed.data.copy_(data)
        self.embed_avg.data.copy_(data.clone())
        self.initted.data.copy_(torch.Tensor([True]))

    def forward(self, x):
        shape, dtype = x.shape, x.dtype
        flatten = x.reshape(-1, shape[-1])
        embed = self.embed.t()
        dist = -(flatten.pow(2).sum(1, keepdim=True) - 2 * flatten @ embed + embed.pow(2).sum(0, keepdim=True))
        embed_ind = dist.max(dim=-1).indices
        embed_onehot = F.one_hot(embed_ind, self.codebook_size).type(dtype)
        embed_ind = embed_ind.view(*shape[:-1])
        quantize = F.embedding(embed_ind, self.embed)

        if self.training and self.ema_update:
            cluster_size = embed_onehot.sum(0)
            ema_inplace(self.cluster_size, cluster_size, self.decay)
            embed_sum = flatten.t() @ embed_onehot
            ema_inplace(self.embed_avg, embed_sum.t(), self.decay)
            cluster_size = laplace_smoothing(self.cluster_size, self.codebook_size, self.eps) * self.cluster_size.sum()
            self.embed.data.copy_(self.embed_avg / cluster_size.unsqueeze(1))
        return quantize, embed_ind


class VectorQuantize(nn.Module):
    def __init__(self, dim, codebook_size, codebook_dim=None, decay=0.8, commitment_weight=1.0, ema_update=True):
        super().__init__()
        codebook_dim = codebook_dim or dim
        requires_projection = codebook_dim != dim
        self.project_in = nn.Linear(dim, codebook_dim) if requires_projection else nn.Identity()
        self.project_out = nn.Linear(codebook_dim, dim) if requires_projection else nn.Identity()
        self.commitment_weight = commitment_weight
        self._codebook = EuclideanCodebook(codebook_dim, codebook_size, decay=decay, ema_update=ema_update)
        self.codebook_size = codebook_size

    @property
    def codebook(self):
        return self._codebook.embed

    def forward(self, x):
        device = x.device
        x = self.project_in(x)
        quantize, embed_ind = self._codebook(x)
        if self.training:
            quantize = x + (quantize - x).detach()
        loss = torch.tensor([0.], device=device, requires_grad=self.training)
        if self.training and self.commitment_weight > 0:
            commit_loss = F.mse_loss(quantize.detach(), x)
            loss = loss + commit_loss * self.commitment_weight
        quantize = self.project_out(quantize)
        return quantize, embed_ind, loss


# ----------------------------------------------------------------------------- models
class TeacherFeatures(nn.Module):
    """ frozen frame-level feature extractor standing in for a pretrained HuBERT layer """

    def __init__(self, frame, dim):
        super().__init__()
        self.proj = nn.Conv1d(1, dim, kernel_size=frame, stride=frame)
        for p in self.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def forward(self, wav):
        return torch.tanh(self.proj(wav.unsqueeze(1))).transpose(1, 2)


class UnitEncoder(nn.Module):
    def __init__(self, frame, dim, codebook_size, commitment_weight):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(1, dim, kernel_size=frame, stride=frame), nn.GELU(),
                                  nn.Conv1d(dim, dim, kernel_size=3, padding=1))
        self.norm = nn.LayerNorm(dim)
        self.vq = VectorQuantize(dim, codebook_size, commitment_weight=commitment_weight)

    def forward(self, wav):
        feats = self.norm(self.conv(wav.unsqueeze(1)).transpose(1, 2))
        quantized, units, vq_loss = self.vq(feats)
        return quantized, units, vq_loss.sum()


def kmeans(samples, num_clusters, num_iters=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    means = samples[torch.randperm(samples.shape[0], generator=g)[:num_clusters]].clone()
    for _ in range(num_iters):
        buckets = torch.cdist(samples, means).argmin(dim=-1)
        for k in range(num_clusters):
            members = samples[buckets == k]
            if len(members):
                means[k] = members.mean(0)
    return means


def freeze_codebook(vq):
    """ keep the k-means codebook fixed while the encoder is fine-tuned """
    vq.eval()


# ----------------------------------------------------------------------------- training
@dataclass
class TrainConfig:
    frame: int = 16
    dim: int = 32
    codebook_size: int = 24
    commitment_weight: float = 0.25
    freeze_codebook: bool = True
    lr: float = 3e-3
    warmup_steps: int = 4
    steps: int = 12
    eval_every: int = 4
    batch_size: int = 8
    seed: int = 0
    callbacks: list = field(default_factory=list)


class LoggingCallback:
    def on_step_end(self, trainer, step, logs):
        if step % 4 == 0:
            print("step {:3d} | loss {:.4f} | lr {:.5f}".format(step, logs["loss"], logs["lr"]))

    def on_evaluate(self, trainer, step, metrics):
        print("step {:3d} | eval unit acc {:.3f} | feat mse {:.4f}".format(step, metrics["unit_acc"], metrics["mse"]))


class Trainer:
    def __init__(self, cfg, model, teacher, train_wavs, valid_wavs):
        self.cfg, self.model, self.teacher = cfg, model, teacher
        self.train_wavs, self.valid_wavs = train_wavs, valid_wavs
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
        warmup = lambda s: min(1.0, (s + 1) / cfg.warmup_steps) * 0.5 * (1 + math.cos(math.pi * s / cfg.steps))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup)
        self.callbacks = cfg.callbacks or [LoggingCallback()]
        self.rng = np.random.RandomState(cfg.seed)

    def _batch(self):
        idx = self.rng.choice(len(self.train_wavs), self.cfg.batch_size, replace=False)
        return self.train_wavs[torch.from_numpy(idx)]

    def _units_of(self, feats):
        return torch.cdist(feats, self.model.vq.codebook.unsqueeze(0)).argmin(-1)

    def train_step(self, wav):
        self.model.train()
        if self.cfg.freeze_codebook:
            freeze_codebook(self.model.vq)
        target = self.teacher(wav)
        quantized, units, vq_loss = self.model(wav)
        loss = F.mse_loss(quantized, target) + vq_loss
        self.optimizer.zero_grad()
        loss.backward()  # raises
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return {"loss": loss.item(), "lr": self.scheduler.get_last_lr()[0]}

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        target = self.teacher(self.valid_wavs)
        quantized, units, _ = self.model(self.valid_wavs)
        unit_acc = (units == self._units_of(target)).float().mean().item()
        return {"unit_acc": unit_acc, "mse": F.mse_loss(quantized, target).item()}

    def fit(self):
        for step in range(1, self.cfg.steps + 1):
            logs = self.train_step(self._batch())
            for cb in self.callbacks:
                cb.on_step_end(self, step, logs)
            if step % self.cfg.eval_every == 0:
                metrics = self.evaluate()
                for cb in self.callbacks:
                    cb.on_evaluate(self, step, metrics)


def synth_wavs(n, length, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length).float() / 16000
    f0 = 100 + 200 * torch.rand(n, 1, generator=g)
    return torch.sin(2 * math.pi * f0 * t) + 0.1 * torch.randn(n, length, generator=g)


def main():
    cfg = TrainConfig()
    torch.manual_seed(cfg.seed)
    teacher = TeacherFeatures(cfg.frame, cfg.dim)
    model = UnitEncoder(cfg.frame, cfg.dim, cfg.codebook_size, cfg.commitment_weight)
    train_wavs, valid_wavs = synth_wavs(32, 640, seed=1), synth_wavs(8, 640, seed=2)

    # codebook from k-means over teacher features (the "predetermined" units)
    feats = teacher(train_wavs).reshape(-1, cfg.dim)
    model.vq._codebook.init_embed_(kmeans(feats, cfg.codebook_size, seed=cfg.seed))
    Trainer(cfg, model, teacher, train_wavs, valid_wavs).fit()


if __name__ == "__main__":
    main()
