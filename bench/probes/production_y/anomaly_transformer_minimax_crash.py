# expect: inplace_version
# source: https://github.com/thuml/Anomaly-Transformer/issues/1
"""Anomaly Transformer for multivariate time-series anomaly detection.

Each attention layer produces a series association (softmax of QK^T) and a prior
association (learned-scale Gaussian kernel over |i-j|); the association
discrepancy is trained with the paper's minimax strategy. Synthetic sensor data
with injected spikes; windows are scored by reconstruction error weighted by the
association discrepancy.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def my_kl_loss(p, q):
    res = p * (torch.log(p + 0.0001) - torch.log(q + 0.0001))
    return torch.mean(torch.sum(res, dim=-1), dim=1)


def adjust_learning_rate(optimizer, epoch, lr_):
    lr = lr_ * (0.5 ** ((epoch - 1) // 1))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr


class EarlyStopping:
    def __init__(self, patience=3, delta=0):
        self.patience, self.delta = patience, delta
        self.counter, self.best_score, self.best_score2 = 0, None, None
        self.early_stop = False
        self.best_state = None

    def __call__(self, val_loss, val_loss2, model):
        score, score2 = -val_loss, -val_loss2
        if self.best_score is None or (score >= self.best_score + self.delta
                                       and score2 >= self.best_score2 + self.delta):
            self.best_score, self.best_score2 = score, score2
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.counter = 0
        else:
            self.counter += 1
            self.early_stop = self.counter >= self.patience


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, max_len=512):
        super().__init__()
        self.token = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular")
        pe = torch.zeros(max_len, d_model)
        pos = torch.arange(max_len).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.token(x.permute(0, 2, 1)).transpose(1, 2) + self.pe[:, : x.size(1)]


class AnomalyAttention(nn.Module):
    def __init__(self, win_size, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.sigma = nn.Linear(d_model, n_heads)
        self.out = nn.Linear(d_model, d_model)
        idx = torch.arange(win_size).float()
        self.register_buffer("distances", (idx[:, None] - idx[None, :]).abs())

    def forward(self, x):
        B, L, _ = x.shape
        q = self.q(x).view(B, L, self.h, self.dk).transpose(1, 2)
        k = self.k(x).view(B, L, self.h, self.dk).transpose(1, 2)
        v = self.v(x).view(B, L, self.h, self.dk).transpose(1, 2)
        series = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.dk), dim=-1)
        sigma = self.sigma(x).transpose(1, 2)                     # B, H, L
        sigma = torch.pow(3, torch.sigmoid(sigma * 5) + 1e-5) - 1
        sigma = sigma.unsqueeze(-1).repeat(1, 1, 1, L)
        prior = 1.0 / (math.sqrt(2 * math.pi) * sigma) * torch.exp(
            -self.distances ** 2 / 2 / (sigma ** 2))
        out = (series @ v).transpose(1, 2).reshape(B, L, -1)
        return self.out(out), series, prior, sigma


class EncoderLayer(nn.Module):
    def __init__(self, win_size, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.attn = AnomalyAttention(win_size, d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        a, series, prior, sigma = self.attn(x)
        x = self.norm1(x + self.drop(a))
        return self.norm2(x + self.drop(self.ff(x))), series, prior, sigma


class AnomalyTransformer(nn.Module):
    def __init__(self, win_size, enc_in, c_out, d_model=32, n_heads=4, e_layers=2, d_ff=64):
        super().__init__()
        self.embedding = DataEmbedding(enc_in, d_model)
        self.layers = nn.ModuleList([EncoderLayer(win_size, d_model, n_heads, d_ff)
                                     for _ in range(e_layers)])
        self.projection = nn.Linear(d_model, c_out)

    def forward(self, x):
        h = self.embedding(x)
        series_list, prior_list, sigma_list = [], [], []
        for layer in self.layers:
            h, series, prior, sigma = layer(h)
            series_list.append(series)
            prior_list.append(prior)
            sigma_list.append(sigma)
        return self.projection(h), series_list, prior_list, sigma_list


def make_loader(n_windows, win_size, channels, batch_size, seed, anomalies=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n_windows * win_size).float()
    base = torch.stack([torch.sin(t / (5 + c)) for c in range(channels)], dim=1)
    data = base + 0.05 * torch.randn(base.shape, generator=g)
    labels = torch.zeros(len(t))
    if anomalies:
        spikes = torch.randint(0, len(t), (n_windows,), generator=g)
        data[spikes] += 3.0
        labels[spikes] = 1
    x = data.view(n_windows, win_size, channels)
    y = labels.view(n_windows, win_size)
    return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, n_windows, batch_size)]


class Solver(object):
    DEFAULTS = {}

    def __init__(self, config):
        self.__dict__.update(Solver.DEFAULTS, **config)
        self.train_loader = make_loader(32, self.win_size, self.input_c, self.batch_size, 0)
        self.test_loader = make_loader(16, self.win_size, self.input_c, self.batch_size, 1, True)
        self.device = torch.device("cpu")
        self.criterion = nn.MSELoss()
        self.build_model()

    def build_model(self):
        self.model = AnomalyTransformer(win_size=self.win_size, enc_in=self.input_c,
                                        c_out=self.output_c, e_layers=2)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr)

    def association_losses(self, series, prior):
        series_loss, prior_loss = 0.0, 0.0
        for u in range(len(prior)):
            norm_prior = prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(
                1, 1, 1, self.win_size)
            series_loss += (torch.mean(my_kl_loss(series[u], norm_prior.detach()))
                            + torch.mean(my_kl_loss(norm_prior.detach(), series[u])))
            prior_loss += (torch.mean(my_kl_loss(norm_prior, series[u].detach()))
                           + torch.mean(my_kl_loss(series[u].detach(), norm_prior)))
        return series_loss / len(prior), prior_loss / len(prior)

    def vali(self, loader):
        self.model.eval()
        loss_1, loss_2 = [], []
        with torch.no_grad():
            for input_data, _ in loader:
                output, series, prior, _ = self.model(input_data.float())
                series_loss, prior_loss = self.association_losses(series, prior)
                rec_loss = self.criterion(output, input_data)
                loss_1.append((rec_loss - self.k * series_loss).item())
                loss_2.append((rec_loss + self.k * prior_loss).item())
        return np.average(loss_1), np.average(loss_2)

    def train_step(self, input_data):
        self.optimizer.zero_grad()
        output, series, prior, _ = self.model(input_data.float())
        series_loss, prior_loss = self.association_losses(series, prior)
        rec_loss = self.criterion(output, input_data)
        loss1 = rec_loss - self.k * series_loss
        loss2 = rec_loss + self.k * prior_loss
        # Minimax strategy
        loss1.backward(retain_graph=True)
        self.optimizer.step()
        loss2.backward()  # raises
        self.optimizer.step()
        return loss1.item()

    def train(self):
        early_stopping = EarlyStopping(patience=3)
        for epoch in range(self.num_epochs):
            epoch_time = time.time()
            self.model.train()
            losses = [self.train_step(x) for x, _ in self.train_loader]
            vali_loss1, vali_loss2 = self.vali(self.test_loader)
            print("Epoch: {0} cost time: {1:.2f}s | Train Loss: {2:.5f} Vali Loss: {3:.5f}".format(
                epoch + 1, time.time() - epoch_time, np.average(losses), vali_loss1))
            early_stopping(vali_loss1, vali_loss2, self.model)
            if early_stopping.early_stop:
                break
            adjust_learning_rate(self.optimizer, epoch + 1, self.lr)

    @torch.no_grad()
    def test(self, temperature=50):
        self.model.eval()
        energies, labels = [], []
        for input_data, y in self.test_loader:
            output, series, prior, _ = self.model(input_data.float())
            loss = torch.mean((input_data - output) ** 2, dim=-1)
            metric = 0.0
            for u in range(len(prior)):
                norm_prior = prior[u] / prior[u].sum(-1, keepdim=True)
                metric = metric - my_kl_loss(series[u], norm_prior) * temperature \
                    - my_kl_loss(norm_prior, series[u]) * temperature
            energies.append((torch.softmax(metric, dim=-1) * loss).numpy().reshape(-1))
            labels.append(y.numpy().reshape(-1))
        energy, gt = np.concatenate(energies), np.concatenate(labels)
        thresh = np.percentile(energy, 100 - self.anormly_ratio)
        pred = (energy > thresh).astype(int)
        tp = ((pred == 1) & (gt == 1)).sum()
        return tp / max(pred.sum(), 1), tp / max(gt.sum(), 1)


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    config = dict(lr=1e-3, num_epochs=2, k=3, win_size=20, input_c=4, output_c=4,
                  batch_size=8, anormly_ratio=2.0)
    solver = Solver(config)
    solver.train()
    precision, recall = solver.test()
    print("precision {:.3f} recall {:.3f}".format(precision, recall))


if __name__ == "__main__":
    main()
