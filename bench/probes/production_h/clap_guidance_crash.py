# expect: no_grad_fn
# source: https://github.com/LAION-AI/CLAP/pull/92
"""Contrastive language-audio pretraining (CLAP-style) on synthetic tones,
followed by CLAP-guided optimisation of a differentiable additive
synthesiser towards a text prompt (classifier-guidance style)."""
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)

VOCAB = ["low", "high", "tone", "noisy", "burst", "rising", "chirp", "soft", "loud"]
CAPTIONS = {0: "low tone", 1: "high tone", 2: "noisy burst", 3: "rising chirp"}


@dataclass
class CLAPConfig:
    audio_cfg: dict = field(default_factory=lambda: {"sample_rate": 2000, "window_size": 128, "hop_size": 32,
                                                     "mel_bins": 16, "fmin": 20, "fmax": 1000})
    max_len: int = 1024
    embed_dim: int = 32
    pretrain_steps: int = 25
    batch: int = 16
    guide_steps: int = 10
    guide_lr: float = 0.05
    prompt: str = "high tone"


def int16_to_float32(x):
    return (x / 32767.0).astype(np.float32)


def float32_to_int16(x):
    x = np.clip(x, a_min=-1.0, a_max=1.0)
    return (x * 32767.0).astype(np.int16)


def mel_filterbank(cfg):
    sr, n_fft, n_mels = cfg["sample_rate"], cfg["window_size"], cfg["mel_bins"]
    hz2mel = lambda f: 2595 * np.log10(1 + f / 700.0)
    mel2hz = lambda m: 700 * (10 ** (m / 2595.0) - 1)
    mels = np.linspace(hz2mel(cfg["fmin"]), hz2mel(cfg["fmax"]), n_mels + 2)
    bins = np.floor((n_fft + 1) * mel2hz(mels) / sr).astype(int)
    fb = np.zeros((n_mels, n_fft // 2 + 1), dtype=np.float32)
    for m in range(1, n_mels + 1):
        lo, c, hi = bins[m - 1], bins[m], max(bins[m + 1], bins[m] + 1)
        fb[m - 1, lo:c] = (np.arange(lo, c) - lo) / max(c - lo, 1)
        fb[m - 1, c:hi] = (hi - np.arange(c, hi)) / max(hi - c, 1)
    return torch.tensor(fb)


def get_mel(audio_data, audio_cfg):
    spec = torch.stft(audio_data, n_fft=audio_cfg["window_size"], hop_length=audio_cfg["hop_size"],
                      window=torch.hann_window(audio_cfg["window_size"]), return_complex=True).abs() ** 2
    mel = mel_filterbank(audio_cfg) @ spec
    return torch.log(mel + 1e-6).T


def get_audio_features(sample, audio_data, max_len, data_truncating, data_filling, audio_cfg):
    with torch.no_grad():
        if len(audio_data) > max_len:
            if data_truncating == "rand_trunc":
                overflow = len(audio_data) - max_len
                idx = np.random.randint(0, overflow + 1)
                audio_data = audio_data[idx: idx + max_len]
            longer = torch.tensor([True])
        else:
            if len(audio_data) < max_len:
                if data_filling == "repeatpad":
                    n_repeat = int(max_len / len(audio_data))
                    audio_data = audio_data.repeat(n_repeat)
                    audio_data = F.pad(audio_data, (0, max_len - len(audio_data)), mode="constant", value=0)
                else:
                    audio_data = F.pad(audio_data, (0, max_len - len(audio_data)), mode="constant", value=0)
            longer = torch.tensor([False])
        sample["mel_fusion"] = get_mel(audio_data, audio_cfg).unsqueeze(0)
    sample["longer"] = longer
    sample["waveform"] = audio_data
    return sample


class AudioEncoder(nn.Module):
    def __init__(self, mel_bins, dim):
        super().__init__()
        self.bn0 = nn.BatchNorm1d(mel_bins)
        self.conv = nn.Sequential(nn.Conv1d(mel_bins, 32, 3, padding=1), nn.GELU(),
                                  nn.Conv1d(32, 32, 3, padding=1), nn.GELU())
        self.proj = nn.Sequential(nn.Linear(64, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, mel):
        x = self.conv(self.bn0(mel.transpose(1, 2)))
        return self.proj(torch.cat([x.mean(-1), x.amax(-1)], -1))


class TextEncoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.emb = nn.EmbeddingBag(len(VOCAB), dim, mode="mean")
        self.proj = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, tokens, offsets):
        return self.proj(self.emb(tokens, offsets))


class CLAP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.audio_branch = AudioEncoder(cfg.audio_cfg["mel_bins"], cfg.embed_dim)
        self.text_branch = TextEncoder(cfg.embed_dim)
        self.logit_scale = nn.Parameter(torch.tensor(np.log(1 / 0.07), dtype=torch.float32))

    def get_audio_embedding(self, data):
        mel = torch.cat([d["mel_fusion"] for d in data], 0)
        return F.normalize(self.audio_branch(mel), dim=-1)

    def get_text_embedding(self, tokens, offsets):
        return F.normalize(self.text_branch(tokens, offsets), dim=-1)


def tokenize(texts):
    ids, offsets = [], []
    for t in texts:
        offsets.append(len(ids))
        ids.extend(VOCAB.index(w) for w in t.split())
    return torch.tensor(ids), torch.tensor(offsets)


class CLAP_Module(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = CLAP(cfg)
        self.model_cfg = {"audio_cfg": cfg.audio_cfg}

    def get_audio_embedding_from_data(self, x, use_tensor=False):
        self.model.eval()
        audio_input = []
        for audio_waveform in x:
            if not use_tensor:
                audio_waveform = int16_to_float32(float32_to_int16(audio_waveform))
                audio_waveform = torch.from_numpy(audio_waveform).float()
            temp_dict = {}
            temp_dict = get_audio_features(temp_dict, audio_waveform, self.cfg.max_len, data_truncating="rand_trunc",
                                           data_filling="repeatpad", audio_cfg=self.model_cfg["audio_cfg"])
            audio_input.append(temp_dict)
        audio_embed = self.model.get_audio_embedding(audio_input)
        if not use_tensor:
            audio_embed = audio_embed.detach().cpu().numpy()
        return audio_embed

    def get_text_embedding(self, texts):
        return self.model.get_text_embedding(*tokenize(texts))


def synth_clip(kind, n, sr, rng):
    t = np.arange(n) / sr
    if kind == 0:
        y = np.sin(2 * np.pi * rng.uniform(60, 120) * t)
    elif kind == 1:
        y = np.sin(2 * np.pi * rng.uniform(500, 800) * t)
    elif kind == 2:
        y = rng.normal(0, 0.5, n) * np.exp(-t * 8)
    else:
        y = np.sin(2 * np.pi * (100 + 300 * t) * t)
    return (0.8 * y).astype(np.float32)


class AdditiveSynth(nn.Module):
    def __init__(self, n_partials, sr, n):
        super().__init__()
        self.register_buffer("t", torch.arange(n) / sr)
        self.log_freq = nn.Parameter(torch.log(torch.linspace(80, 200, n_partials)))
        self.amp_logits = nn.Parameter(torch.zeros(n_partials))

    def forward(self):
        amps = torch.softmax(self.amp_logits, 0)
        phase = 2 * np.pi * self.log_freq.exp().unsqueeze(-1) * self.t
        return 0.8 * (amps.unsqueeze(-1) * torch.sin(phase)).sum(0)


def main():
    cfg, rng, t0 = CLAPConfig(), np.random.default_rng(0), time.time()
    clap = CLAP_Module(cfg)
    opt = torch.optim.AdamW(clap.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.pretrain_steps)
    sr, n = cfg.audio_cfg["sample_rate"], cfg.max_len
    for step in range(cfg.pretrain_steps):
        kinds = rng.integers(0, 4, cfg.batch)
        clips = [synth_clip(int(k), int(rng.integers(n // 2, n + 200)), sr, rng) for k in kinds]
        audio_emb = torch.as_tensor(np.stack([c for c in clap.get_audio_embedding_from_data(clips)]))
        clap.model.train()
        feats = [get_audio_features({}, torch.from_numpy(c), n, "rand_trunc", "repeatpad", cfg.audio_cfg)
                 for c in clips]
        a = clap.model.get_audio_embedding(feats)
        tx = clap.get_text_embedding([CAPTIONS[int(k)] for k in kinds])
        logits = clap.model.logit_scale.exp() * a @ tx.T
        labels = torch.as_tensor(kinds)
        same = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
        loss = 0.5 * (F.cross_entropy(logits, same / same.sum(1, keepdim=True))
                      + F.cross_entropy(logits.T, same / same.sum(0, keepdim=True).T))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 8 == 0:
            drift = (torch.as_tensor(audio_emb) - a.detach()).norm(dim=-1).mean().item()
            print(f"pretrain {step} loss {loss.item():.4f} eval/train drift {drift:.3f}")
    clap.requires_grad_(False)
    with torch.no_grad():
        target = clap.get_text_embedding([cfg.prompt])
    synth = AdditiveSynth(4, sr, n)
    g_opt = torch.optim.Adam(synth.parameters(), lr=cfg.guide_lr)
    for step in range(cfg.guide_steps):
        wav = synth()
        emb = clap.get_audio_embedding_from_data(wav.unsqueeze(0), use_tensor=True)
        loss = 1 - (emb * target).sum(-1).mean()
        g_opt.zero_grad()
        loss.backward()  # raises
        g_opt.step()
        print(f"guide {step} sim {1 - loss.item():.4f} freqs {synth.log_freq.exp().detach().numpy().round(1)}")
    print(f"done ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
