# expect: inplace_version
# source: https://github.com/wesbz/SoundStream/issues/7
"""SoundStream-style neural audio codec trained adversarially (CPU, synthetic audio).

Causal-conv encoder / residual vector quantizer / causal-conv decoder, a
multi-scale waveform discriminator and an STFT discriminator, adversarial +
feature-matching + multi-resolution spectral reconstruction losses, and a
training loop that alternates generator and discriminator updates.  Audio is
seeded sine mixtures so everything runs in a few seconds.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


@dataclass
class Config:
    C: int = 4
    D: int = 8
    n_q: int = 2
    codebook_size: int = 16
    segment: int = 1024
    batch_size: int = 2
    n_epochs: int = 1
    steps_per_epoch: int = 3
    lambda_adv: float = 1.0
    lambda_feat: float = 100.0
    lambda_rec: float = 1.0
    lr: float = 1e-4
    seed: int = 0


class CausalConv1d(nn.Conv1d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.causal_padding = self.dilation[0] * (self.kernel_size[0] - 1)

    def forward(self, x):
        return self._conv_forward(F.pad(x, [self.causal_padding, 0]), self.weight, self.bias)


class ResidualUnit(nn.Module):
    def __init__(self, channels, dilation):
        super().__init__()
        self.layers = nn.Sequential(
            CausalConv1d(channels, channels, kernel_size=7, dilation=dilation), nn.ELU(),
            nn.Conv1d(channels, channels, kernel_size=1))

    def forward(self, x):
        return x + self.layers(x)


class EncoderBlock(nn.Module):
    def __init__(self, out_channels, stride):
        super().__init__()
        self.layers = nn.Sequential(
            ResidualUnit(out_channels // 2, 1), nn.ELU(),
            ResidualUnit(out_channels // 2, 3), nn.ELU(),
            CausalConv1d(out_channels // 2, out_channels, kernel_size=2 * stride, stride=stride))

    def forward(self, x):
        return self.layers(x)


class DecoderBlock(nn.Module):
    def __init__(self, out_channels, stride):
        super().__init__()
        self.up = nn.ConvTranspose1d(2 * out_channels, out_channels, kernel_size=2 * stride, stride=stride)
        self.stride = stride
        self.res = nn.Sequential(nn.ELU(), ResidualUnit(out_channels, 1), nn.ELU(), ResidualUnit(out_channels, 3))

    def forward(self, x):
        y = self.up(x)[..., :x.shape[-1] * self.stride]
        return self.res(y)


class ResidualVQ(nn.Module):
    def __init__(self, num_quantizers, dim, codebook_size):
        super().__init__()
        self.codebooks = nn.Parameter(torch.randn(num_quantizers, codebook_size, dim))

    def forward(self, x):
        z = x.transpose(1, 2)
        residual, quantized = z, torch.zeros_like(z)
        for cb in self.codebooks:
            idx = torch.cdist(residual, cb.unsqueeze(0).expand(z.shape[0], -1, -1)).argmin(-1)
            q = cb[idx]
            quantized = quantized + q
            residual = residual - q.detach()
        quantized = z + (quantized - z).detach()  # straight-through
        return quantized.transpose(1, 2)


class SoundStream(nn.Module):
    def __init__(self, C, D, n_q, codebook_size):
        super().__init__()
        self.encoder = nn.Sequential(
            CausalConv1d(1, C, kernel_size=7), nn.ELU(),
            EncoderBlock(2 * C, stride=2), nn.ELU(),
            EncoderBlock(4 * C, stride=4), nn.ELU(),
            CausalConv1d(4 * C, D, kernel_size=3))
        self.quantizer = ResidualVQ(n_q, D, codebook_size)
        self.decoder = nn.Sequential(
            CausalConv1d(D, 8 * C, kernel_size=7), nn.ELU(),
            DecoderBlock(4 * C, stride=4), nn.ELU(),
            DecoderBlock(2 * C, stride=2), nn.ELU(),
            CausalConv1d(2 * C, 1, kernel_size=7))

    def forward(self, x):
        return self.decoder(self.quantizer(self.encoder(x)))


class WaveDiscriminatorBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.Sequential(nn.Conv1d(1, 8, 15, padding=7), nn.LeakyReLU(0.2)),
            nn.Sequential(nn.Conv1d(8, 16, 41, stride=4, padding=20, groups=4), nn.LeakyReLU(0.2)),
            nn.Sequential(nn.Conv1d(16, 16, 5, padding=2), nn.LeakyReLU(0.2)),
            nn.Conv1d(16, 1, 3, padding=1)])

    def forward(self, x):
        feats = []
        for layer in self.layers:
            x = layer(x)
            feats.append(x)
        return feats


class WaveDiscriminator(nn.Module):
    def __init__(self, num_D=2):
        super().__init__()
        self.model = nn.ModuleList([WaveDiscriminatorBlock() for _ in range(num_D)])
        self.downsampler = nn.AvgPool1d(4, stride=2, padding=1, count_include_pad=False)

    def forward(self, x):
        results = []
        for disc in self.model:
            results.append(disc(x))
            x = self.downsampler(x)
        return results


class STFTDiscriminator(nn.Module):
    def __init__(self, C=4):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.Sequential(nn.Conv2d(2, C, (7, 7), padding=3), nn.ELU()),
            nn.Sequential(nn.Conv2d(C, 2 * C, (4, 3), stride=(2, 1), padding=1), nn.ELU()),
            nn.Conv2d(2 * C, 1, (3, 3), padding=1)])

    def forward(self, x):
        feats = []
        for layer in self.layers:
            x = layer(x)
            feats.append(x)
        return feats


def stft(x, n_fft=128, hop=32):
    window = torch.hann_window(n_fft)
    spec = torch.stft(x.squeeze(1), n_fft=n_fft, hop_length=hop, window=window, return_complex=True)
    return torch.view_as_real(spec).permute(0, 3, 1, 2)


def feature_loss(feats_real, feats_fake):
    loss = 0.0
    for fr, ff in zip(feats_real, feats_fake):
        loss = loss + (fr.detach() - ff).abs().mean()
    return loss / len(feats_real)


def spectral_reconstruction_loss(x, G_x, eps=1e-4):
    L = 0.0
    for i in range(6, 9):
        s = 2 ** i
        S_x = stft(x, n_fft=s, hop=s // 4).pow(2).sum(1)
        S_G_x = stft(G_x, n_fft=s, hop=s // 4).pow(2).sum(1)
        L = L + (S_x - S_G_x).abs().mean() + math.sqrt(s / 2) * (
            (torch.log(S_x + eps) - torch.log(S_G_x + eps)) ** 2).mean()
    return L


def criterion_g(cfg, x, G_x, real, fake):
    (stft_r, wave_r), (stft_f, wave_f) = real, fake
    adv = F.relu(1 - stft_f[-1]).mean() + sum(F.relu(1 - w[-1]).mean() for w in wave_f) / len(wave_f)
    feat = feature_loss(stft_r, stft_f) + sum(feature_loss(a, b) for a, b in zip(wave_r, wave_f))
    return cfg.lambda_adv * adv + cfg.lambda_feat * feat + cfg.lambda_rec * spectral_reconstruction_loss(x, G_x)


def criterion_d(real, fake):
    (stft_r, wave_r), (stft_f, wave_f) = real, fake
    real_loss = F.relu(1 - stft_r[-1]).mean() + sum(F.relu(1 - w[-1]).mean() for w in wave_r)
    fake_loss = F.relu(1 + stft_f[-1]).mean() + sum(F.relu(1 + w[-1]).mean() for w in wave_f)
    return real_loss + fake_loss


class CodecTrainer(object):
    def __init__(self, cfg):
        self.cfg = cfg
        self.soundstream = SoundStream(cfg.C, cfg.D, cfg.n_q, cfg.codebook_size)
        self.wave_disc = WaveDiscriminator(num_D=2)
        self.stft_disc = STFTDiscriminator(C=4)
        self.optimizer_g = optim.Adam(self.soundstream.parameters(), lr=cfg.lr, betas=(0.5, 0.9))
        self.optimizer_d = optim.Adam(list(self.wave_disc.parameters()) + list(self.stft_disc.parameters()),
                                      lr=cfg.lr, betas=(0.5, 0.9))
        self.history = {"train": {"d": [], "g": []}, "valid": {"d": [], "g": []}}

    def sample_batch(self, step):
        g = torch.Generator().manual_seed(self.cfg.seed + step)
        t = torch.arange(self.cfg.segment).float() / 16000.0
        freqs = 100 + 900 * torch.rand(self.cfg.batch_size, 3, 1, generator=g)
        return torch.sin(2 * math.pi * freqs * t).sum(1, keepdim=True) / 3.0

    def discriminate(self, x):
        return self.stft_disc(stft(x)), self.wave_disc(x)

    def train_step(self, x):
        G_x = self.soundstream(x)
        features_real = self.discriminate(x)
        features_fake = self.discriminate(G_x)

        loss_g = criterion_g(self.cfg, x, G_x, features_real, features_fake)
        self.optimizer_g.zero_grad()
        loss_g.backward(retain_graph=True)
        self.optimizer_g.step()

        loss_d = criterion_d(features_real, features_fake)
        self.optimizer_d.zero_grad()
        loss_d.backward()  # raises
        self.optimizer_d.step()
        return loss_g.item(), loss_d.item()

    @torch.no_grad()
    def evaluate(self):
        x = self.sample_batch(10_000)
        G_x = self.soundstream(x)
        real, fake = self.discriminate(x), self.discriminate(G_x)
        return criterion_g(self.cfg, x, G_x, real, fake).item(), criterion_d(real, fake).item()

    def fit(self):
        step = 0
        for epoch in range(1, self.cfg.n_epochs + 1):
            self.soundstream.train(); self.wave_disc.train(); self.stft_disc.train()
            g_tot, d_tot = 0.0, 0.0
            for _ in range(self.cfg.steps_per_epoch):
                lg, ld = self.train_step(self.sample_batch(step))
                g_tot += lg; d_tot += ld; step += 1
            self.history["train"]["g"].append(g_tot / self.cfg.steps_per_epoch)
            self.history["train"]["d"].append(d_tot / self.cfg.steps_per_epoch)
            vg, vd = self.evaluate()
            self.history["valid"]["g"].append(vg)
            self.history["valid"]["d"].append(vd)
            print("epoch", epoch, self.history["train"], self.history["valid"])


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    CodecTrainer(cfg).fit()


if __name__ == "__main__":
    main()
