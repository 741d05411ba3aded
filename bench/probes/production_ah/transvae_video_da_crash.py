# expect: no_grad_fn
# source: https://github.com/ldkong1205/TranSVAE/issues/11
"""Disentangled sequential VAE for unsupervised video domain adaptation
(TranSVAE-style): frame features from a source and a target domain are encoded
into a static latent z_f and a dynamic latent sequence z_t; a classifier on the
dynamic factors is trained on labelled source clips while reconstruction + KL +
domain-adversarial (gradient reversal) terms use both domains.

Synthetic seeded "frame features" replace the I3D features of UCF/HMDB.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_opt(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--feat_dim", type=int, default=32)
    p.add_argument("--z_dim", type=int, default=8)
    p.add_argument("--f_dim", type=int, default=8)
    p.add_argument("--num_segments", type=int, default=5)
    p.add_argument("--num_class", type=int, default=4)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight_VAE", type=float, default=1.0)
    p.add_argument("--weight_adv", type=float, default=0.1)
    p.add_argument("--use_VAE", type=int, default=0)
    p.add_argument("--clip_gradient", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.beta = beta
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.neg() * ctx.beta, None


class TranSVAE(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.opt = opt
        self.enc_frame = nn.Sequential(nn.Linear(opt.feat_dim, 32), nn.LeakyReLU(0.1))
        self.z_lstm = nn.LSTM(32, 32, batch_first=True, bidirectional=True)
        self.f_mean = nn.Linear(64, opt.f_dim)
        self.f_logvar = nn.Linear(64, opt.f_dim)
        self.z_rnn = nn.GRU(64, 32, batch_first=True)
        self.z_mean = nn.Linear(32, opt.z_dim)
        self.z_logvar = nn.Linear(32, opt.z_dim)
        self.z_prior = nn.GRUCell(opt.z_dim, 16)
        self.z_prior_mean = nn.Linear(16, opt.z_dim)
        self.z_prior_logvar = nn.Linear(16, opt.z_dim)
        self.dec = nn.Sequential(nn.Linear(opt.z_dim + opt.f_dim, 32), nn.LeakyReLU(0.1), nn.Linear(32, opt.feat_dim))
        self.classifier = nn.Linear(opt.z_dim, opt.num_class)
        self.domain_cls = nn.Sequential(nn.Linear(opt.z_dim, 16), nn.ReLU(), nn.Linear(16, 2))

    @staticmethod
    def reparameterize(mean, logvar):
        return mean + torch.randn_like(mean) * torch.exp(0.5 * logvar)

    def sample_prior(self, b, t):
        h = torch.zeros(b, 16)
        z = torch.zeros(b, self.opt.z_dim)
        means, logvars = [], []
        for _ in range(t):
            h = self.z_prior(z, h)
            m, lv = self.z_prior_mean(h), self.z_prior_logvar(h)
            z = self.reparameterize(m, lv)
            means.append(m)
            logvars.append(lv)
        return torch.stack(means, 1), torch.stack(logvars, 1)

    def forward(self, x, beta=1.0):
        b, t, _ = x.shape
        h, _ = self.z_lstm(self.enc_frame(x))
        f_mean, f_logvar = self.f_mean(h[:, -1]), self.f_logvar(h[:, -1])
        f = self.reparameterize(f_mean, f_logvar)
        g, _ = self.z_rnn(h)
        z_mean, z_logvar = self.z_mean(g), self.z_logvar(g)
        z = self.reparameterize(z_mean, z_logvar)
        recon = self.dec(torch.cat([z, f.unsqueeze(1).expand(-1, t, -1)], -1))
        zp_mean, zp_logvar = self.sample_prior(b, t)
        pooled = z.mean(1)
        return {
            "recon": recon, "f_mean": f_mean, "f_logvar": f_logvar,
            "z_mean": z_mean, "z_logvar": z_logvar, "zp_mean": zp_mean, "zp_logvar": zp_logvar,
            "pred": self.classifier(pooled),
            "pred_domain": self.domain_cls(GradReverse.apply(pooled, beta)),
        }


def vae_loss(x, out):
    mse = F.mse_loss(out["recon"], x, reduction="sum") / x.size(0)
    kld_f = -0.5 * torch.sum(1 + out["f_logvar"] - out["f_mean"].pow(2) - out["f_logvar"].exp()) / x.size(0)
    zv, zpv = out["z_logvar"].exp(), out["zp_logvar"].exp()
    kld_z = 0.5 * torch.sum(out["zp_logvar"] - out["z_logvar"]
                            + (zv + (out["z_mean"] - out["zp_mean"]).pow(2)) / zpv - 1) / x.size(0)
    return mse + kld_f + kld_z


def make_loaders(opt):
    g = torch.Generator().manual_seed(opt.seed)
    protos = torch.randn(opt.num_class, opt.feat_dim, generator=g)

    def clips(shift):
        out = []
        for _ in range(opt.iters):
            y = torch.randint(0, opt.num_class, (opt.batch_size,), generator=g)
            x = protos[y].unsqueeze(1) + 0.3 * torch.randn(opt.batch_size, opt.num_segments, opt.feat_dim, generator=g)
            out.append((x + shift, y))
        return out

    return clips(0.0), clips(0.5)


def train(source_loader, target_loader, model, optimizer, epoch, criterion_src, criterion_domain, opt):
    model.train()
    losses = []
    for i, ((xs, ys), (xt, _)) in enumerate(zip(source_loader, target_loader)):
        beta = 2.0 / (1.0 + np.exp(-10 * (epoch * opt.iters + i) / (opt.epochs * opt.iters))) - 1
        out_s, out_t = model(xs, beta), model(xt, beta)
        loss_c = criterion_src(out_s["pred"], ys)
        dom_logits = torch.cat([out_s["pred_domain"], out_t["pred_domain"]])
        dom_labels = torch.cat([torch.zeros(len(xs)), torch.ones(len(xt))]).long()
        loss_adv = criterion_domain(dom_logits, dom_labels)
        VAE_loss = opt.weight_VAE * (vae_loss(xs, out_s) + vae_loss(xt, out_t))
        loss = loss_c + opt.weight_adv * loss_adv + VAE_loss
        optimizer.zero_grad()
        if opt.use_VAE:
            VAE_loss.backward()
        else:
            loss.backward()  # raises
        if opt.clip_gradient is not None:
            nn.utils.clip_grad_norm_(model.parameters(), opt.clip_gradient)
        optimizer.step()
        losses.append(loss.item())
    return float(np.mean(losses)), loss_c.item()


def validate(target_loader, model):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in target_loader:
            correct += (model(x)["pred"].argmax(1) == y).sum().item()
            total += len(y)
    return correct / total


def main(opt):
    torch.manual_seed(opt.seed)
    source_loader, target_loader = make_loaders(opt)
    model = TranSVAE(opt)
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=opt.epochs)
    criterion_src, criterion_domain = nn.CrossEntropyLoss(), nn.CrossEntropyLoss()
    best = 0.0
    for epoch in range(opt.epochs):
        start = time.time()
        loss, loss_c = train(source_loader, target_loader, model, optimizer, epoch, criterion_src, criterion_domain, opt)
        scheduler.step()
        acc = validate(target_loader, model)
        best = max(best, acc)
        print(f"epoch {epoch} loss {loss:.3f} cls {loss_c:.3f} target acc {acc:.3f} ({time.time() - start:.2f}s)")
    print(f"best target accuracy {best:.3f}")


opt = parse_opt([])
with torch.no_grad():
    if __name__ == "__main__":
        main(opt)
