# expect: clean
# source: https://github.com/ar4/deepwave/issues/49
"""Least-squares Born imaging (LSRTM) where the scattering potential is not a
free parameter but is produced by a small CNN from the migration velocity model.

A minimal differentiable 2-D constant-density acoustic Born propagator stands
in for deepwave.scalar_born.  Synthetic "observed" data come from a true
scattering model with two reflectors; the CNN is trained over several epochs,
with the shots split into batches, SGD + a step LR schedule, and an
end-of-epoch evaluation and history callback.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    parser = argparse.ArgumentParser(description="Born imaging with a CNN-parameterised scatter model")
    parser.add_argument("--ny", type=int, default=24)
    parser.add_argument("--nx", type=int, default=24)
    parser.add_argument("--dx", type=float, default=4.0)
    parser.add_argument("--dt", type=float, default=0.0008)
    parser.add_argument("--nt", type=int, default=60)
    parser.add_argument("--freq", type=float, default=25.0)
    parser.add_argument("--n-shots", type=int, default=4)
    parser.add_argument("--n-receivers", type=int, default=12)
    parser.add_argument("--n-batch", type=int, default=2)
    parser.add_argument("--n-epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--loss-scale", type=float, default=1e6)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def ricker(freq, length, dt, peak_time):
    t = torch.arange(float(length)) * dt - peak_time
    y = (1 - 2 * math.pi ** 2 * freq ** 2 * t ** 2) * torch.exp(-math.pi ** 2 * freq ** 2 * t ** 2)
    return y


def laplacian(u, dx):
    up = F.pad(u.unsqueeze(1), (1, 1, 1, 1)).squeeze(1)
    return (up[:, 2:, 1:-1] + up[:, :-2, 1:-1] + up[:, 1:-1, 2:] + up[:, 1:-1, :-2] - 4 * u) / dx ** 2


def scalar_born(v, scatter, dx, dt, source_amplitudes, source_locations, receiver_locations):
    """Return (background receiver data, scattered receiver data), each (shots, receivers, nt)."""
    n_shots, _, nt = source_amplitudes.shape
    ny, nx = v.shape[-2:]
    v = v.reshape(ny, nx)
    scatter = scatter.reshape(ny, nx)
    u_prev = torch.zeros(n_shots, ny, nx)
    u = torch.zeros(n_shots, ny, nx)
    sc_prev = torch.zeros(n_shots, ny, nx)
    sc = torch.zeros(n_shots, ny, nx)
    shot_idx = torch.arange(n_shots).unsqueeze(1)
    sy, sx = source_locations[..., 0], source_locations[..., 1]
    ry, rx = receiver_locations[..., 0], receiver_locations[..., 1]
    v2dt2 = (v * dt) ** 2
    rec_u, rec_sc = [], []
    for it in range(nt):
        src = torch.zeros(n_shots, ny, nx)
        src[shot_idx, sy, sx] = source_amplitudes[:, :, it] * dt ** 2
        u_next = 2 * u - u_prev + v2dt2 * laplacian(u, dx) + src
        d2u = (u_next - 2 * u + u_prev) / dt ** 2
        sc_next = 2 * sc - sc_prev + v2dt2 * laplacian(sc, dx) + 2 * v * scatter * dt ** 2 * d2u
        rec_u.append(u_next[shot_idx, ry, rx])
        rec_sc.append(sc_next[shot_idx, ry, rx])
        u_prev, u = u, u_next
        sc_prev, sc = sc, sc_next
    return torch.stack(rec_u, -1), torch.stack(rec_sc, -1)


class Survey:
    """Surface acquisition geometry: sources and receivers along the top row."""
    def __init__(self, args):
        self.args = args
        self.source_locations = torch.zeros(args.n_shots, 1, 2, dtype=torch.long)
        self.source_locations[:, 0, 0] = 1
        self.source_locations[:, 0, 1] = torch.linspace(2, args.nx - 3, args.n_shots).long()
        self.receiver_locations = torch.zeros(args.n_shots, args.n_receivers, 2, dtype=torch.long)
        self.receiver_locations[..., 0] = 1
        self.receiver_locations[..., 1] = torch.linspace(1, args.nx - 2, args.n_receivers).long()
        wavelet = ricker(args.freq, args.nt, args.dt, 1.5 / args.freq)
        self.source_amplitudes = wavelet.repeat(args.n_shots, 1, 1)

    @property
    def n_shots(self):
        return self.args.n_shots

    def batches(self):
        per_batch = (self.n_shots + self.args.n_batch - 1) // self.args.n_batch
        for batch in range(self.args.n_batch):
            start = batch * per_batch
            end = min(start + per_batch, self.n_shots)
            if end > start:
                yield slice(start, end)


class ScatterNet(nn.Module):
    """Maps a (normalised) migration velocity model to a scattering potential."""
    def __init__(self, channels=8):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.head = nn.Conv2d(channels, 1, 1)
        self.register_buffer("v_mean", torch.tensor(1500.0))
        self.register_buffer("v_std", torch.tensor(100.0))

    def set_normalisation(self, v):
        self.v_mean.fill_(float(v.mean()))
        self.v_std.fill_(float(v.std()) + 1.0)

    def forward(self, v):
        x = (v - self.v_mean) / self.v_std
        x = torch.tanh(self.conv1(x))
        x = torch.tanh(self.conv2(x))
        return 10.0 * self.head(x)


class HistoryCallback:
    def __init__(self):
        self.history = []

    def on_epoch_end(self, epoch, logs):
        self.history.append(logs)
        print("epoch {:d}: loss {:.4e}, model rms {:.4e}, {:.2f}s".format(
            epoch, logs["loss"], logs["model_rms"], logs["time"]))


class BornTrainer:
    def __init__(self, args, net, survey, v_mig, observed, callbacks=()):
        self.args, self.net, self.survey = args, net, survey
        self.v_mig = v_mig
        self.observed = observed
        self.callbacks = list(callbacks)
        self.optimiser = torch.optim.SGD(net.parameters(), lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimiser, step_size=2, gamma=0.5)
        self.loss_fn = nn.MSELoss()

    def predict(self, scatter, s):
        _, out = scalar_born(self.v_mig, scatter, self.args.dx, self.args.dt,
                             source_amplitudes=self.survey.source_amplitudes[s],
                             source_locations=self.survey.source_locations[s],
                             receiver_locations=self.survey.receiver_locations[s])
        return out

    def train_epoch(self):
        self.net.train()
        epoch_loss = 0.0
        self.optimiser.zero_grad()
        for s in self.survey.batches():
            v_tmp = self.net(self.v_mig.unsqueeze(0).unsqueeze(0))
            scatter = torch.zeros_like(self.v_mig).unsqueeze(0).unsqueeze(0) + v_tmp
            out = self.predict(scatter, s)
            loss = self.args.loss_scale * self.loss_fn(out, self.observed[s])
            epoch_loss += loss.item()
            loss.backward()
        self.optimiser.step()
        self.scheduler.step()
        return epoch_loss

    @torch.no_grad()
    def evaluate(self):
        self.net.eval()
        scatter = self.net(self.v_mig.unsqueeze(0).unsqueeze(0))
        return float(scatter.pow(2).mean().sqrt())

    def fit(self):
        for epoch in range(self.args.n_epochs):
            t0 = time.time()
            loss = self.train_epoch()
            logs = {"loss": loss, "model_rms": self.evaluate(), "time": time.time() - t0}
            for cb in self.callbacks:
                cb.on_epoch_end(epoch, logs)


def make_models(args):
    v_true = torch.full((args.ny, args.nx), 1500.0)
    v_true[args.ny // 2:] = 1700.0
    scatter_true = torch.zeros(args.ny, args.nx)
    scatter_true[args.ny // 2, :] = 200.0
    scatter_true[3 * args.ny // 4, args.nx // 4:3 * args.nx // 4] = -150.0
    kernel = torch.ones(1, 1, 5, 5) / 25.0
    v_mig = F.conv2d(F.pad(v_true[None, None], (2, 2, 2, 2), mode="replicate"), kernel)[0, 0]
    return v_true, scatter_true, v_mig


def main():
    args = get_args([])
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    survey = Survey(args)
    v_true, scatter_true, v_mig = make_models(args)
    with torch.no_grad():
        _, observed = scalar_born(v_true, scatter_true, args.dx, args.dt,
                                  survey.source_amplitudes, survey.source_locations,
                                  survey.receiver_locations)
    net = ScatterNet()
    net.set_normalisation(v_mig)
    history = HistoryCallback()
    trainer = BornTrainer(args, net, survey, v_mig, observed, callbacks=[history])
    trainer.fit()
    print("final loss {:.4e}".format(history.history[-1]["loss"]))


if __name__ == "__main__":
    main()
