# expect: clean
# source: https://github.com/rishikksh20/HiFi-GAN/issues/8
"""HiFi-GAN vocoder training loop (rishikksh20/HiFi-GAN layout, synthetic audio).

Generator with transposed-conv upsampling and a multi-receptive-field fusion
block, a multi-scale and a multi-period discriminator that join the game after
`discriminator_train_start_steps`, a TacotronSTFT helper that produces mel
spectrograms for the L1 mel loss, and separate generator / discriminator Adam
optimizers with exponential LR decay.  Mel/audio pairs are generated from
seeded sine mixtures.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

hp = SimpleNamespace(
    audio=SimpleNamespace(filter_length=256, hop_length=64, win_length=256, n_mel_channels=16,
                          sampling_rate=8000, mel_fmin=0.0, mel_fmax=4000.0, segment_length=1024),
    train=SimpleNamespace(batch_size=2, discriminator_train_start_steps=2, rep_discriminator=1,
                          adam_lr=2e-4, beta1=0.8, beta2=0.99, lr_decay=0.999, steps=4, stft_loss=False),
    model=SimpleNamespace(lambda_mel=45.0, lambda_adv=1.0, feat_loss=True, feat_match=2.0),
    seed=1234,
)


def mel_filterbank(sr, n_fft, n_mels, fmin, fmax):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)
    mels = torch.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.floor((n_fft + 1) * hz / sr).long()
    fb = torch.zeros(n_mels, n_fft // 2 + 1)
    for m in range(1, n_mels + 1):
        l, c, r = bins[m - 1].item(), bins[m].item(), bins[m + 1].item()
        for k in range(l, c):
            fb[m - 1, k] = (k - l) / max(c - l, 1)
        for k in range(c, r):
            fb[m - 1, k] = (r - k) / max(r - c, 1)
    return fb


class TacotronSTFT(nn.Module):
    def __init__(self, filter_length, hop_length, win_length, n_mel_channels, sampling_rate, mel_fmin, mel_fmax):
        super().__init__()
        self.filter_length, self.hop_length, self.win_length = filter_length, hop_length, win_length
        self.register_buffer('mel_basis', mel_filterbank(sampling_rate, filter_length, n_mel_channels,
                                                         mel_fmin, mel_fmax))
        self.register_buffer('window', torch.hann_window(win_length))

    def spectral_normalize(self, magnitudes):
        return torch.log(torch.clamp(magnitudes, min=1e-5))

    def mel_spectrogram(self, y, requires_grad=False):
        """Computes mel-spectrograms from a batch of waves (B, T) -> (B, n_mel, frames)."""
        spec = torch.stft(y, self.filter_length, self.hop_length, self.win_length, self.window,
                          return_complex=True)
        magnitudes = spec.abs()
        if not requires_grad:
            magnitudes = magnitudes.data
        mel_output = torch.matmul(self.mel_basis, magnitudes)
        return self.spectral_normalize(mel_output)


class ResBlock(nn.Module):
    def __init__(self, channels, kernel_size, dilations):
        super().__init__()
        self.convs = nn.ModuleList([
            nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=(kernel_size * d - d) // 2)
            for d in dilations])

    def forward(self, x):
        for c in self.convs:
            x = x + c(F.leaky_relu(x, 0.1))
        return x


class MRF(nn.Module):
    def __init__(self, channels, kernels=(3, 7), dilations=((1, 3), (1, 3))):
        super().__init__()
        self.blocks = nn.ModuleList([ResBlock(channels, k, d) for k, d in zip(kernels, dilations)])

    def forward(self, x):
        return sum(b(x) for b in self.blocks) / len(self.blocks)


class Generator(nn.Module):
    def __init__(self, mel_channel, upsample=(8, 8), channels=32):
        super().__init__()
        self.pre = nn.Conv1d(mel_channel, channels, 7, padding=3)
        ups, mrfs, ch = [], [], channels
        for u in upsample:
            ups.append(nn.ConvTranspose1d(ch, ch // 2, 2 * u, stride=u, padding=u // 2))
            ch //= 2
            mrfs.append(MRF(ch))
        self.ups, self.mrfs = nn.ModuleList(ups), nn.ModuleList(mrfs)
        self.post = nn.Conv1d(ch, 1, 7, padding=3)

    def forward(self, mel):
        x = self.pre(mel)
        for up, mrf in zip(self.ups, self.mrfs):
            x = mrf(up(F.leaky_relu(x, 0.1)))
        return torch.tanh(self.post(F.leaky_relu(x)))


class ScaleDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Conv1d(1, 8, 15, padding=7), nn.Conv1d(8, 16, 41, 4, padding=20, groups=4),
                                     nn.Conv1d(16, 16, 5, padding=2)])
        self.out = nn.Conv1d(16, 1, 3, padding=1)

    def forward(self, x):
        feats = []
        for l in self.layers:
            x = F.leaky_relu(l(x), 0.1)
            feats.append(x)
        return feats, self.out(x)


class PeriodDiscriminator(nn.Module):
    def __init__(self, period):
        super().__init__()
        self.period = period
        self.layers = nn.ModuleList([nn.Conv2d(1, 8, (5, 1), (3, 1), padding=(2, 0)),
                                     nn.Conv2d(8, 16, (5, 1), (3, 1), padding=(2, 0))])
        self.out = nn.Conv2d(16, 1, (3, 1), padding=(1, 0))

    def forward(self, x):
        b, c, t = x.shape
        if t % self.period:
            x = F.pad(x, (0, self.period - t % self.period), 'reflect')
        x = x.view(b, c, -1, self.period)
        feats = []
        for l in self.layers:
            x = F.leaky_relu(l(x), 0.1)
            feats.append(x)
        return feats, self.out(x)


class MultiDiscriminator(nn.Module):
    def __init__(self, discs):
        super().__init__()
        self.discs = nn.ModuleList(discs)

    def forward(self, x):
        return [d(x) for d in self.discs]


def feature_matching(real_out, fake_out):
    loss = 0.0
    for (fr, _), (ff, _) in zip(real_out, fake_out):
        for a, b in zip(fr, ff):
            loss = loss + torch.mean(torch.abs(b - a.detach()))
    return loss


class VocoderTrainer(object):
    def __init__(self, hp):
        self.hp = hp
        a = hp.audio
        self.model_g = Generator(a.n_mel_channels)
        self.model_d = MultiDiscriminator([ScaleDiscriminator(), ScaleDiscriminator()])
        self.model_d_mpd = MultiDiscriminator([PeriodDiscriminator(p) for p in (2, 3)])
        self.optim_g = torch.optim.AdamW(self.model_g.parameters(), lr=hp.train.adam_lr,
                                         betas=(hp.train.beta1, hp.train.beta2))
        self.optim_d = torch.optim.AdamW(list(self.model_d.parameters()) + list(self.model_d_mpd.parameters()),
                                         lr=hp.train.adam_lr, betas=(hp.train.beta1, hp.train.beta2))
        self.scheduler_g = torch.optim.lr_scheduler.ExponentialLR(self.optim_g, gamma=hp.train.lr_decay)
        self.scheduler_d = torch.optim.lr_scheduler.ExponentialLR(self.optim_d, gamma=hp.train.lr_decay)
        self.stft = TacotronSTFT(a.filter_length, a.hop_length, a.win_length, a.n_mel_channels,
                                 a.sampling_rate, a.mel_fmin, a.mel_fmax)
        self.l1loss = nn.L1Loss()
        self.criterion = nn.MSELoss()
        self.step = 0

    def sample(self):
        g = torch.Generator().manual_seed(self.hp.seed + self.step)
        t = torch.arange(self.hp.audio.segment_length).float() / self.hp.audio.sampling_rate
        f = 100 + 1500 * torch.rand(self.hp.train.batch_size, 2, 1, generator=g)
        audio = 0.5 * torch.sin(2 * math.pi * f * t).mean(1)
        with torch.no_grad():
            mel = self.stft.mel_spectrogram(audio)
        return mel, audio.unsqueeze(1)

    def generator_loss(self, melG, audioG, fake_audio):
        loss_g = 0.0
        if self.hp.train.stft_loss:
            loss_g = loss_g + F.l1_loss(torch.stft(fake_audio.squeeze(1), 256, return_complex=True).abs(),
                                        torch.stft(audioG.squeeze(1), 256, return_complex=True).abs())
        adv_loss = 0.0
        if self.step > self.hp.train.discriminator_train_start_steps:
            fake_msd, real_msd = self.model_d(fake_audio), self.model_d(audioG)
            fake_mpd, real_mpd = self.model_d_mpd(fake_audio), self.model_d_mpd(audioG)
            for _, score_fake in fake_msd + fake_mpd:
                adv_loss = adv_loss + self.criterion(score_fake, torch.ones_like(score_fake))
            if self.hp.model.feat_loss:
                adv_loss = adv_loss + self.hp.model.feat_match * (feature_matching(real_msd, fake_msd)
                                                                  + feature_matching(real_mpd, fake_mpd))
            loss_g = loss_g + self.hp.model.lambda_adv * adv_loss
        mel_fake = self.stft.mel_spectrogram(fake_audio.squeeze(1), requires_grad=True)
        loss_mel = self.l1loss(melG[:, :, :mel_fake.size(2)], mel_fake)
        loss_g = loss_g + self.hp.model.lambda_mel * loss_mel
        return loss_g

    def train_step(self):
        melG, audioG = self.sample()
        self.optim_g.zero_grad()
        fake_audio = self.model_g(melG)[:, :, :self.hp.audio.segment_length]
        loss_g = self.generator_loss(melG, audioG, fake_audio)
        loss_g.backward()
        self.optim_g.step()

        loss_d_avg = 0.0
        if self.step > self.hp.train.discriminator_train_start_steps:
            fake_audio = fake_audio.detach()
            for _ in range(self.hp.train.rep_discriminator):
                self.optim_d.zero_grad()
                loss_d = 0.0
                for disc in (self.model_d, self.model_d_mpd):
                    for (_, s_fake), (_, s_real) in zip(disc(fake_audio), disc(audioG)):
                        loss_d = loss_d + self.criterion(s_real, torch.ones_like(s_real)) \
                                 + self.criterion(s_fake, torch.zeros_like(s_fake))
                loss_d.backward()
                self.optim_d.step()
                loss_d_avg += loss_d.item()
        self.step += 1
        return loss_g.item(), loss_d_avg

    @torch.no_grad()
    def validate(self):
        mel, audio = self.sample()
        fake = self.model_g(mel)[:, :, :self.hp.audio.segment_length]
        return self.l1loss(self.stft.mel_spectrogram(fake.squeeze(1)), mel).item()

    def fit(self):
        for _ in range(self.hp.train.steps):
            g, d = self.train_step()
            print('step %d g %.4f d %.4f' % (self.step, g, d))
        self.scheduler_g.step(); self.scheduler_d.step()
        print('val mel l1 %.4f' % self.validate())


def main():
    torch.manual_seed(hp.seed)
    VocoderTrainer(hp).fit()


if __name__ == '__main__':
    main()
