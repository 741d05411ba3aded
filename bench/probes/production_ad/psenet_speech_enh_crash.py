# expect: freed_graph
# source: https://github.com/VinAIResearch/PSENet-Image-Enhancement/issues/1
"""Reference-free speech enhancement with self-generated pseudo targets.

A PSENet-style LightningModule adapted to speech: the network predicts a
per-frequency gain curve applied to the noisy magnitude spectrogram.  For each
batch, several synthetic references (different gain exponents) plus the
model's own previous output are scored by a no-reference quality estimator and
the best-scoring one becomes the pseudo target; as in the original, the
(n-1)-th batch and its pseudo target are used to update the weights at step n.
A small Lightning-like Trainer with automatic optimization, ReduceLROnPlateau
and a logger drives training.  Audio is synthetic.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class GainNet(nn.Module):
    """U-Net-ish 1D conv net over frequency bins predicting gain exponents."""

    def __init__(self, n_freq=65, hidden=32):
        super().__init__()
        self.down = nn.Sequential(nn.Conv1d(n_freq, hidden, 3, padding=1), nn.ReLU(),
                                  nn.Conv1d(hidden, hidden, 3, padding=1), nn.ReLU())
        self.up = nn.Sequential(nn.Conv1d(2 * hidden, hidden, 3, padding=1), nn.ReLU(),
                                nn.Conv1d(hidden, n_freq, 3, padding=1))

    def forward(self, mag):
        h = self.down(mag)
        g = self.up(torch.cat([h, h.mean(-1, keepdim=True).expand_as(h)], dim=1))
        gamma = torch.exp(torch.tanh(g))
        enhanced = mag.clamp(1e-4, 1.0) ** gamma
        return enhanced, gamma


class TVLoss(nn.Module):
    def forward(self, x):
        return (x[..., 1:] - x[..., :-1]).abs().mean() + (x[:, 1:] - x[:, :-1]).abs().mean()


class QualityEstimator(nn.Module):
    """Frozen no-reference quality scorer (stand-in for a DNSMOS-like model)."""

    def __init__(self, n_freq=65):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(n_freq, 16, 3, padding=1), nn.ReLU(), nn.Conv1d(16, 1, 1))
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, mag):
        return self.net(mag)


class PSENet(nn.Module):
    def __init__(self, tv_w, gamma_lower, gamma_upper, number_refs, lr):
        super().__init__()
        self.tv_w, self.gamma_lower, self.gamma_upper = tv_w, gamma_lower, gamma_upper
        self.number_refs, self.lr = number_refs, lr
        self.model = GainNet()
        self.mse = nn.MSELoss()
        self.tv = TVLoss()
        self.iqa = QualityEstimator()
        self.saved_input = None
        self.saved_pseudo_gt = None
        self.logged = {}

    def log(self, name, value):
        self.logged[name] = float(value)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr, betas=[0.9, 0.99])
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=10, factor=0.5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "total_loss"}

    def generate_pseudo_gt(self, mag):
        bs, nf, t = mag.shape
        under = torch.exp(torch.rand([bs, self.number_refs]) *
                          torch.linspace(0, self.gamma_upper, self.number_refs)[None])
        over = torch.exp(torch.rand([bs, self.number_refs]) *
                         torch.linspace(self.gamma_lower, 0, self.number_refs)[None])
        gammas = torch.cat([under, over], dim=1)
        synthetic_references = mag.clamp(1e-4, 1.0)[:, None] ** gammas[:, :, None, None]
        previous_iter_output = self.model(mag)[0].clone().detach()
        references = torch.cat([mag[:, None], previous_iter_output[:, None], synthetic_references], dim=1)
        nref = references.shape[1]
        scores = self.iqa(references.view(bs * nref, nf, t)).view(bs, nref, 1, t)
        max_idx = torch.argmax(scores, dim=1).repeat(1, nf, 1)[:, None]
        return torch.gather(references, 1, max_idx).squeeze(1)

    def training_step(self, batch, batch_idx):
        nth_input = batch
        nth_pseudo_gt = self.generate_pseudo_gt(batch)
        if self.saved_input is not None:
            mag = self.saved_input
            pred_mag, pred_gamma = self.model(mag)
            pseudo_gt = self.saved_pseudo_gt
            reconstruction_loss = self.mse(pred_mag, pseudo_gt)
            tv_loss = self.tv(pred_gamma)
            loss = reconstruction_loss + tv_loss * self.tv_w
            loss.backward()
            self.log("total_loss", loss.item())
        else:
            loss = None
            self.log("total_loss", 0)
        self.saved_input = nth_input
        self.saved_pseudo_gt = nth_pseudo_gt
        return loss

    @torch.no_grad()
    def validation_step(self, batch, batch_idx):
        pred_mag, _ = self.model(batch)
        return 10 * torch.log10(pred_mag.pow(2).mean() / batch.pow(2).mean()).item()


class Trainer:
    """Automatic optimization loop in the spirit of pytorch_lightning.Trainer."""

    def __init__(self, max_epochs, log_every_n_steps=2):
        self.max_epochs, self.log_every_n_steps = max_epochs, log_every_n_steps
        self.global_step = 0

    def backward(self, loss):
        loss.backward()  # raises

    def fit(self, module, train_batches, val_batches):
        conf = module.configure_optimizers()
        optimizer, scheduler = conf["optimizer"], conf["lr_scheduler"]
        for epoch in range(self.max_epochs):
            module.train()
            for batch_idx, batch in enumerate(train_batches):
                loss = module.training_step(batch, batch_idx)
                if loss is None:
                    continue
                optimizer.zero_grad()
                self.backward(loss)
                optimizer.step()
                self.global_step += 1
            scheduler.step(module.logged[conf["monitor"]])
            module.eval()
            gains = [module.validation_step(b, i) for i, b in enumerate(val_batches)]
            print(f"epoch {epoch}: loss {module.logged['total_loss']:.4f} gain_db {sum(gains) / len(gains):.2f}")


def stft_mag(wave, n_fft=128, hop=32):
    spec = torch.stft(wave, n_fft, hop_length=hop, window=torch.hann_window(n_fft), return_complex=True)
    mag = spec.abs()
    return mag / mag.amax(dim=(1, 2), keepdim=True)


def synthetic_noisy_speech(n_batches, batch_size, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(4000) / 8000.0
    batches = []
    for _ in range(n_batches):
        f0 = 120 + 80 * torch.rand(batch_size, 1, generator=g)
        voiced = sum(torch.sin(2 * math.pi * k * f0 * t) / k for k in range(1, 5))
        envelope = (torch.sin(2 * math.pi * 3 * t) > 0).float()
        noise = 0.3 * torch.randn(batch_size, t.numel(), generator=g)
        batches.append(stft_mag(voiced * envelope + noise))
    return batches


def main():
    torch.manual_seed(0)
    hparams = SimpleNamespace(tv_w=0.5, gamma_lower=-2.0, gamma_upper=3.0, number_refs=2, lr=5e-4,
                              max_epochs=2)
    module = PSENet(hparams.tv_w, hparams.gamma_lower, hparams.gamma_upper, hparams.number_refs, hparams.lr)
    trainer = Trainer(max_epochs=hparams.max_epochs)
    trainer.fit(module, synthetic_noisy_speech(3, 4, seed=1), synthetic_noisy_speech(1, 4, seed=2))


if __name__ == "__main__":
    main()
