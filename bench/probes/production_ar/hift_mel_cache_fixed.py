# expect: clean
# source: https://github.com/QwenAudio/CosyVoice/issues/1289
"""HiFi-GAN style vocoder fine-tuning (CosyVoice "hift" stage, miniature).

Matcha-TTS style ``mel_spectrogram`` with module-level ``mel_basis`` /
``hann_window`` caches is used both by the dataset (input features) and by the
generator's mel reconstruction loss.  A GAN executor alternates discriminator
and generator updates with two optimizers and two schedulers, and runs a few
sanity validation steps under inference mode before fitting, like a Lightning
trainer.  Audio is synthetic (random harmonic tones).
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

mel_basis = {}
hann_window = {}


def _mel_filterbank(sr, n_fft, n_mels, fmin, fmax):
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    mels = np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    hz = mel_to_hz(mels)
    bins = np.fft.rfftfreq(n_fft, 1.0 / sr)
    fb = np.zeros((n_mels, len(bins)), dtype=np.float32)
    for m in range(1, n_mels + 1):
        left, center, right = hz[m - 1], hz[m], hz[m + 1]
        fb[m - 1] = np.maximum(0, np.minimum((bins - left) / (center - left), (right - bins) / (right - center)))
    return fb


def dynamic_range_compression_torch(x, C=1, clip_val=1e-5):
    return torch.log(torch.clamp(x, min=clip_val) * C)


def mel_spectrogram(y, n_fft, num_mels, sampling_rate, hop_size, win_size, fmin, fmax, center=False):
    global mel_basis, hann_window  # pylint: disable=global-statement
    if f"{str(fmax)}_{str(y.device)}" not in mel_basis:
        mel = _mel_filterbank(sampling_rate, n_fft, num_mels, fmin, fmax)
        mel_basis[str(fmax) + "_" + str(y.device)] = torch.from_numpy(mel).float().to(y.device)
        hann_window[str(y.device)] = torch.hann_window(win_size).to(y.device)

    y = F.pad(y.unsqueeze(1), (int((n_fft - hop_size) / 2), int((n_fft - hop_size) / 2)), mode="reflect")
    y = y.squeeze(1)

    spec = torch.view_as_real(
        torch.stft(
            y, n_fft, hop_length=hop_size, win_length=win_size, window=hann_window[str(y.device)],
            center=center, pad_mode="reflect", normalized=False, onesided=True, return_complex=True,
        )
    )
    spec = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
    spec = torch.matmul(mel_basis[str(fmax) + "_" + str(y.device)], spec)
    return dynamic_range_compression_torch(spec)


CONFIG = SimpleNamespace(
    sample_rate=8000, n_fft=256, hop_size=64, win_size=256, num_mels=32, fmin=0, fmax=4000,
    segment_len=2048, batch_size=4, lr_g=2e-4, lr_d=2e-4, lr_decay=0.999,
    lambda_mel=45.0, lambda_fm=2.0, num_sanity_val_steps=1, max_steps=3, seed=1986,
)


def feat_extractor(wav, cfg=CONFIG):
    return mel_spectrogram(wav, cfg.n_fft, cfg.num_mels, cfg.sample_rate, cfg.hop_size,
                           cfg.win_size, cfg.fmin, cfg.fmax)


class ToneDataset:
    def __init__(self, n, seed, cfg=CONFIG):
        self.rng = np.random.RandomState(seed)
        self.n = n
        self.cfg = cfg

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        t = np.arange(self.cfg.segment_len) / self.cfg.sample_rate
        f0 = self.rng.uniform(100, 400)
        wav = sum(0.3 / k * np.sin(2 * math.pi * k * f0 * t) for k in range(1, 4))
        speech = torch.from_numpy(wav.astype(np.float32))
        return {"speech": speech, "speech_feat": feat_extractor(speech.unsqueeze(0)).squeeze(0)}


def batches(dataset, batch_size):
    for i in range(0, len(dataset), batch_size):
        items = [dataset[j] for j in range(i, min(i + batch_size, len(dataset)))]
        yield {k: torch.stack([it[k] for it in items]) for k in items[0]}


class ResBlock(nn.Module):
    def __init__(self, ch, dilations=(1, 3)):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(ch, ch, 3, dilation=d, padding=d) for d in dilations])

    def forward(self, x):
        for c in self.convs:
            x = x + c(F.leaky_relu(x, 0.1))
        return x


class HiFTGenerator(nn.Module):
    def __init__(self, in_channels, base_channels=32, upsample_rates=(8, 8)):
        super().__init__()
        self.conv_pre = nn.Conv1d(in_channels, base_channels, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        ch = base_channels
        for r in upsample_rates:
            self.ups.append(nn.ConvTranspose1d(ch, ch // 2, 2 * r, stride=r, padding=r // 2))
            ch //= 2
            self.resblocks.append(ResBlock(ch))
        self.conv_post = nn.Conv1d(ch, 1, 7, padding=3)

    def forward(self, batch):
        x = self.conv_pre(batch["speech_feat"])
        for up, rb in zip(self.ups, self.resblocks):
            x = rb(up(F.leaky_relu(x, 0.1)))
        return torch.tanh(self.conv_post(F.leaky_relu(x))).squeeze(1)


class PeriodDiscriminator(nn.Module):
    def __init__(self, period):
        super().__init__()
        self.period = period
        self.convs = nn.ModuleList([nn.Conv2d(1, 8, (5, 1), (3, 1), padding=(2, 0)),
                                    nn.Conv2d(8, 16, (5, 1), (3, 1), padding=(2, 0))])
        self.conv_post = nn.Conv2d(16, 1, (3, 1), padding=(1, 0))

    def forward(self, x):
        b, t = x.shape
        if t % self.period:
            x = F.pad(x, (0, self.period - t % self.period), "reflect")
        x = x.view(b, 1, -1, self.period)
        fmap = []
        for c in self.convs:
            x = F.leaky_relu(c(x), 0.1)
            fmap.append(x)
        return self.conv_post(x).flatten(1), fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, periods=(2, 3, 5)):
        super().__init__()
        self.discriminators = nn.ModuleList([PeriodDiscriminator(p) for p in periods])

    def forward(self, y, y_hat):
        outs = [(d(y), d(y_hat)) for d in self.discriminators]
        return ([o[0][0] for o in outs], [o[1][0] for o in outs],
                [o[0][1] for o in outs], [o[1][1] for o in outs])


def discriminator_loss(real_outputs, gen_outputs):
    return sum(torch.mean((1 - dr) ** 2) + torch.mean(dg ** 2) for dr, dg in zip(real_outputs, gen_outputs))


def generator_loss(gen_outputs):
    return sum(torch.mean((1 - dg) ** 2) for dg in gen_outputs)


def feature_loss(fmap_r, fmap_g):
    return sum(torch.mean(torch.abs(rl - gl)) for dr, dg in zip(fmap_r, fmap_g) for rl, gl in zip(dr, dg))


def mel_loss(real_speech, generated_speech, transform):
    mel_r = transform(real_speech)
    mel_g = transform(generated_speech)
    return F.l1_loss(mel_g, mel_r)


class HiFiGan(nn.Module):
    def __init__(self, generator, discriminator, cfg=CONFIG):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.cfg = cfg
        self.mel_spec_transform = feat_extractor

    def forward_generator(self, batch):
        real_speech = batch["speech"]
        generated_speech = self.generator(batch)
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = self.discriminator(real_speech, generated_speech)
        loss_gen = generator_loss(y_d_gs)
        loss_fm = feature_loss(fmap_rs, fmap_gs)
        loss_mel = mel_loss(real_speech, generated_speech, self.mel_spec_transform)
        loss = loss_gen + self.cfg.lambda_fm * loss_fm + self.cfg.lambda_mel * loss_mel
        return {"loss": loss, "loss_gen": loss_gen, "loss_fm": loss_fm, "loss_mel": loss_mel}

    def forward_discriminator(self, batch):
        real_speech = batch["speech"]
        with torch.no_grad():
            generated_speech = self.generator(batch)
        y_d_rs, y_d_gs, _, _ = self.discriminator(real_speech, generated_speech.detach())
        loss = discriminator_loss(y_d_rs, y_d_gs)
        return {"loss": loss}


class LogCallback:
    def on_train_step_end(self, step, info):
        print(f"step {step} " + " ".join(f"{k}={v:.4f}" for k, v in info.items()))

    def on_validation_end(self, step, loss):
        print(f"step {step} cv mel loss {loss:.4f}")


class GanExecutor:
    def __init__(self, model, cfg=CONFIG, callbacks=()):
        self.model = model
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.optimizer_d = torch.optim.AdamW(model.discriminator.parameters(), lr=cfg.lr_d, betas=(0.8, 0.99))
        self.optimizer_g = torch.optim.AdamW(model.generator.parameters(), lr=cfg.lr_g, betas=(0.8, 0.99))
        self.scheduler_d = torch.optim.lr_scheduler.ExponentialLR(self.optimizer_d, cfg.lr_decay)
        self.scheduler_g = torch.optim.lr_scheduler.ExponentialLR(self.optimizer_g, cfg.lr_decay)
        self.step = 0

    def train_step(self, batch):
        self.model.train()
        d_out = self.model.forward_discriminator(batch)
        self.optimizer_d.zero_grad()
        d_out["loss"].backward()
        self.optimizer_d.step()

        g_out = self.model.forward_generator(batch)
        self.optimizer_g.zero_grad()
        g_out["loss"].backward()
        nn.utils.clip_grad_norm_(self.model.generator.parameters(), 1000.0)
        self.optimizer_g.step()
        self.scheduler_d.step()
        self.scheduler_g.step()
        self.step += 1
        return {"loss_d": d_out["loss"].item(), **{k: v.item() for k, v in g_out.items()}}

    @torch.no_grad()
    def cv(self, loader, max_batches=None):
        self.model.eval()
        total, n = 0.0, 0
        for i, batch in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            generated = self.model.generator(batch)
            total += mel_loss(batch["speech"], generated, self.model.mel_spec_transform).item()
            n += 1
        return total / max(n, 1)

    def fit(self, train_set, cv_set):
        loss = self.cv(batches(cv_set, self.cfg.batch_size), self.cfg.num_sanity_val_steps)
        for cb in self.callbacks:
            cb.on_validation_end(self.step, loss)
        for batch in batches(train_set, self.cfg.batch_size):
            info = self.train_step(batch)
            for cb in self.callbacks:
                cb.on_train_step_end(self.step, info)
            if self.step >= self.cfg.max_steps:
                break
        loss = self.cv(batches(cv_set, self.cfg.batch_size))
        for cb in self.callbacks:
            cb.on_validation_end(self.step, loss)


def main():
    torch.manual_seed(CONFIG.seed)
    model = HiFiGan(HiFTGenerator(CONFIG.num_mels), MultiPeriodDiscriminator())
    executor = GanExecutor(model, callbacks=[LogCallback()])
    executor.fit(ToneDataset(12, CONFIG.seed), ToneDataset(4, CONFIG.seed + 1))


if __name__ == "__main__":
    main()
