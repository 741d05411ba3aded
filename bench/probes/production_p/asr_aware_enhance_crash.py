# expect: no_grad_fn
# source: https://github.com/speechbrain/speechbrain/pull/1081
"""ASR-aware speech enhancement (SpeechBrain MTL ASR_enhance recipe, condensed).

Stage 1 pre-trains a small CTC recognizer on clean filterbank features.
Stage 2 freezes the recognizer and trains a spectral-masking enhancement model
only through the recognizer: enhanced magnitudes are resynthesized with the
noisy phase, turned back into filterbanks and scored by the CTC loss.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
SR = 8000


# ---------------------------------------------------------------- feature lobes
class STFT(nn.Module):
    def __init__(self, n_fft=256, hop_length=80):
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, x):
        s = torch.stft(x, self.n_fft, self.hop_length, window=self.window, return_complex=True)
        return torch.view_as_real(s).transpose(1, 2)  # (B, T, F, 2)


class ISTFT(nn.Module):
    def __init__(self, n_fft=256, hop_length=80):
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, x, sig_length=None):
        x = torch.view_as_complex(x.transpose(1, 2).contiguous())
        return torch.istft(x, self.n_fft, self.hop_length, window=self.window, length=sig_length)


def spectral_magnitude(stft, power=1, eps=1e-14):
    spectr = stft.pow(2).sum(-1)
    return spectr.pow(power) if power == 1 else (spectr + eps).pow(power)


class Filterbank(nn.Module):
    def __init__(self, n_mels=24, n_fft=256, sample_rate=SR):
        super().__init__()
        def mel(f):
            return 2595 * np.log10(1 + f / 700)
        hz = 700 * (10 ** (np.linspace(mel(0), mel(sample_rate / 2), n_mels + 2) / 2595) - 1)
        freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
        fb = np.zeros((n_fft // 2 + 1, n_mels), dtype=np.float32)
        for m in range(n_mels):
            lo, c, hi = hz[m], hz[m + 1], hz[m + 2]
            fb[:, m] = np.clip(np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)), 0, None)
        self.register_buffer("fbank_matrix", torch.from_numpy(fb))

    def forward(self, spectrogram):
        return torch.log(torch.clamp(spectrogram @ self.fbank_matrix, min=1e-10))


class Deltas(nn.Module):
    def __init__(self, window_length=5):
        super().__init__()
        self.n = (window_length - 1) // 2
        self.denom = self.n * (self.n + 1) * (2 * self.n + 1) / 3
        self.register_buffer("kernel", torch.arange(-self.n, self.n + 1, dtype=torch.float32).view(1, 1, -1))

    def forward(self, x):
        b, t, f = x.shape
        x = x.transpose(1, 2).reshape(b * f, 1, t)
        x = F.pad(x, (self.n, self.n), mode="replicate")
        return (F.conv1d(x, self.kernel) / self.denom).view(b, f, t).transpose(1, 2)


class Fbank(nn.Module):
    """Generate filterbank features (optionally with deltas) from raw waveforms."""

    def __init__(self, deltas=False, n_mels=24, n_fft=256, hop_length=80):
        super().__init__()
        self.deltas = deltas
        self.compute_STFT = STFT(n_fft, hop_length)
        self.compute_fbanks = Filterbank(n_mels, n_fft)
        self.compute_deltas = Deltas()

    def forward(self, wav):
        with torch.no_grad():
            STFT = self.compute_STFT(wav)
            mag = spectral_magnitude(STFT)
            fbanks = self.compute_fbanks(mag)

            if self.deltas:
                delta1 = self.compute_deltas(fbanks)
                delta2 = self.compute_deltas(delta1)
                fbanks = torch.cat([fbanks, delta1, delta2], dim=2)

        return fbanks


class InputNormalization(nn.Module):
    def forward(self, x, lengths=None):
        return (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5)


# ---------------------------------------------------------------- models
class MaskEstimator(nn.Module):
    def __init__(self, n_freq=129, hidden=64):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv1d(n_freq, hidden, 3, padding=1), nn.LeakyReLU(0.1))
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, n_freq)

    def forward(self, x):
        h = self.cnn(x.transpose(1, 2)).transpose(1, 2)
        h, _ = self.rnn(h)
        return torch.sigmoid(self.out(h))


class CRDNNLite(nn.Module):
    def __init__(self, n_feats=72, hidden=64):
        super().__init__()
        self.CNN = nn.Sequential(nn.Conv1d(n_feats, hidden, 3, padding=1), nn.ReLU())
        self.RNN = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)

    def forward(self, x):
        h = self.CNN(x.transpose(1, 2)).transpose(1, 2)
        return self.RNN(h)[0]


# ---------------------------------------------------------------- Brain
class Stage:
    TRAIN, VALID = "train", "valid"


class Brain:
    def __init__(self, modules, opt_class, hparams):
        self.modules = nn.ModuleDict(modules)
        self.hparams = hparams
        self.opt_class = opt_class
        self.init_optimizers()

    def init_optimizers(self):
        params = [p for p in self.modules.parameters() if p.requires_grad]
        self.optimizer = self.opt_class(params)

    def fit_batch(self, batch):
        predictions = self.compute_forward(batch, Stage.TRAIN)
        loss = self.compute_objectives(predictions, batch, Stage.TRAIN)
        loss.backward()  # raises
        torch.nn.utils.clip_grad_norm_(self.modules.parameters(), 5.0)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss.detach()

    def evaluate_batch(self, batch, stage):
        with torch.no_grad():
            predictions = self.compute_forward(batch, stage)
            return self.compute_objectives(predictions, batch, stage).detach()

    def fit(self, epochs, train_set, valid_set):
        for epoch in range(1, epochs + 1):
            self.modules.train()
            train_loss = np.mean([self.fit_batch(b).item() for b in train_set])
            self.modules.eval()
            valid_loss = np.mean([self.evaluate_batch(b, Stage.VALID).item() for b in valid_set])
            print(f"  epoch {epoch}: train loss {train_loss:.3f} valid loss {valid_loss:.3f}")


class MTLbrain(Brain):
    def compute_forward(self, batch, stage):
        predictions = {}
        if self.hparams.enhance_type is not None:
            phase_wavs, noisy_feats, lens = self.prepare_feats(batch.noisy_sig)
            if self.hparams.enhance_type == "masking":
                mask = self.modules.enhance_model(noisy_feats)
                m = self.hparams.mask_weight
                predictions["feats"] = m * torch.mul(mask, noisy_feats) + (1 - m) * noisy_feats
            stft = self.hparams.compute_stft(phase_wavs)
            phase = stft / spectral_magnitude(stft, power=0.5).unsqueeze(-1)
            enhanced_mag = torch.expm1(predictions["feats"])
            predictions["wavs"] = self.hparams.resynth(enhanced_mag.unsqueeze(-1) * phase, phase_wavs.shape[-1])
        if self.hparams.ctc_type == "clean":
            asr_feats = self.hparams.fbank(batch.clean_sig[0])
        else:
            asr_feats = self.hparams.fbank(predictions["wavs"])
        asr_feats = self.hparams.normalizer(asr_feats)
        embed = self.modules.src_embedding(asr_feats)
        predictions["ctc_pout"] = F.log_softmax(self.modules.ctc_output(embed), dim=-1)
        return predictions

    def prepare_feats(self, signal):
        wavs, wav_lens = signal
        feats = self.hparams.compute_stft(wavs)
        feats = spectral_magnitude(feats, power=0.5)
        return wavs, torch.log1p(feats), wav_lens

    def compute_objectives(self, predictions, batch, stage):
        loss = 0
        if self.hparams.enhance_weight > 0:
            _, clean_feats, _ = self.prepare_feats(batch.clean_sig)
            loss += self.hparams.enhance_weight * F.mse_loss(predictions["feats"], clean_feats)
        if self.hparams.ctc_weight > 0:
            tokens, token_lens = batch.tokens
            pout = predictions["ctc_pout"]
            in_lens = torch.full((pout.size(0),), pout.size(1), dtype=torch.long)
            ctc = F.ctc_loss(pout.transpose(0, 1), tokens, in_lens, token_lens, blank=0, zero_infinity=True)
            loss += self.hparams.ctc_weight * ctc
        return loss


# ---------------------------------------------------------------- data
TONES = [0, 440.0, 660.0, 880.0, 1100.0, 1320.0, 1540.0]


def make_batch(rng, batch_size=4, n_tok=4, seg=0.12):
    clean, noisy, toks = [], [], []
    t = np.arange(int(seg * SR)) / SR
    for _ in range(batch_size):
        seq = rng.randint(1, len(TONES), size=n_tok)
        wav = np.concatenate([0.5 * np.sin(2 * math.pi * TONES[k] * t) * np.hanning(len(t)) for k in seq])
        clean.append(wav)
        noisy.append(wav + 0.3 * rng.randn(len(wav)))
        toks.append(seq)
    f = lambda a: torch.tensor(np.stack(a), dtype=torch.float32)
    lens = torch.ones(batch_size)
    return SimpleNamespace(clean_sig=(f(clean), lens), noisy_sig=(f(noisy), lens),
                           tokens=(torch.tensor(np.stack(toks)), torch.full((batch_size,), n_tok)))


def main():
    rng = np.random.RandomState(0)
    train_set = [make_batch(rng) for _ in range(4)]
    valid_set = [make_batch(rng) for _ in range(2)]
    fbank = Fbank(deltas=True)
    modules = {"enhance_model": MaskEstimator(), "src_embedding": CRDNNLite(), "ctc_output": nn.Linear(128, len(TONES))}

    print("stage 1: pretrain recognizer on clean features")
    hp1 = SimpleNamespace(enhance_type=None, ctc_type="clean", enhance_weight=0.0, ctc_weight=1.0,
                          mask_weight=0.99, compute_stft=STFT(), resynth=ISTFT(), fbank=fbank,
                          normalizer=InputNormalization())
    modules["enhance_model"].requires_grad_(False)
    asr = MTLbrain(modules, lambda p: torch.optim.Adam(p, lr=3e-3), hp1)
    asr.fit(3, train_set, valid_set)

    print("stage 2: train enhancement through the frozen recognizer")
    modules["enhance_model"].requires_grad_(True)
    modules["src_embedding"].requires_grad_(False)
    modules["ctc_output"].requires_grad_(False)
    hp2 = SimpleNamespace(**{**vars(hp1), "enhance_type": "masking", "ctc_type": "joint"})
    enh = MTLbrain(modules, lambda p: torch.optim.Adam(p, lr=1e-3), hp2)
    enh.fit(2, train_set, valid_set)


main()
