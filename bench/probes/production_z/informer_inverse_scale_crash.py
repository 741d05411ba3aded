# expect: numpy_requires_grad
# source: https://github.com/zhouhaoyi/Informer2020/issues/82
"""Informer-style long-sequence time-series forecaster (encoder with distilling,
generative-style decoder) trained on a synthetic multivariate ETT-like series.

Follows the Exp_Basic / Exp_Informer layout: _get_data builds Dataset_Custom
objects with a fitted StandardScaler, _process_one_batch builds the decoder
input from the label window, and `--inverse` reports losses on the original
scale.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class StandardScaler:
    """Mean/std scaler with the sklearn preprocessing interface."""

    def fit(self, X):
        X = np.asarray(X, dtype=np.float64)
        self.mean_ = X.mean(0)
        self.scale_ = X.std(0) + 1e-8
        return self

    def transform(self, X):
        X = np.asarray(X, dtype=np.float64)
        return (X - self.mean_) / self.scale_

    def inverse_transform(self, X):
        X = np.asarray(X)  # raises
        return X * self.scale_ + self.mean_


def make_series(n=400, dims=4, seed=0):
    rng = np.random.RandomState(seed)
    t = np.arange(n)
    base = np.stack([np.sin(2 * np.pi * t / (24 + 6 * k)) * (5 + k) + 20 for k in range(dims)], 1)
    return (base + rng.normal(scale=0.5, size=base.shape)).astype(np.float32), t


class Dataset_Custom(Dataset):
    def __init__(self, args, flag="train"):
        self.seq_len, self.label_len, self.pred_len = args.seq_len, args.label_len, args.pred_len
        data, t = make_series(seed=args.seed)
        border1s = [0, 240 - self.seq_len, 320 - self.seq_len]
        border2s = [240, 320, 400]
        i = {"train": 0, "val": 1, "test": 2}[flag]
        self.scaler = StandardScaler().fit(data[border1s[0]:border2s[0]])
        scaled = self.scaler.transform(data).astype(np.float32)
        self.data_x = scaled[border1s[i]:border2s[i]]
        self.data_y = scaled[border1s[i]:border2s[i]]
        stamp = np.stack([(t % 24) / 23.0 - 0.5, ((t // 24) % 7) / 6.0 - 0.5], 1).astype(np.float32)
        self.data_stamp = stamp[border1s[i]:border2s[i]]

    def __getitem__(self, index):
        s_end = index + self.seq_len
        r_begin = s_end - self.label_len
        r_end = r_begin + self.label_len + self.pred_len
        return (self.data_x[index:s_end], self.data_y[r_begin:r_end],
                self.data_stamp[index:s_end], self.data_stamp[r_begin:r_end])

    def __len__(self):
        return len(self.data_x) - self.seq_len - self.pred_len + 1

    def inverse_transform(self, data):
        return self.scaler.inverse_transform(data)


class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.pe[:, : x.size(1)]


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.05):
        super().__init__()
        self.value_embedding = nn.Conv1d(c_in, d_model, 3, padding=1, padding_mode="circular")
        self.position_embedding = PositionalEmbedding(d_model)
        self.temporal_embedding = nn.Linear(2, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x.permute(0, 2, 1)).transpose(1, 2)
        return self.dropout(x + self.position_embedding(x) + self.temporal_embedding(x_mark))


class AttentionLayer(nn.Module):
    def __init__(self, d_model, n_heads, mask_flag=False):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.mask_flag = mask_flag

    def forward(self, q, k, v):
        mask = None
        if self.mask_flag:
            L = q.size(1)
            mask = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
        return self.attn(q, k, v, attn_mask=mask)[0]


class ConvLayer(nn.Module):
    """Distilling layer halving the sequence length between encoder layers."""

    def __init__(self, c_in):
        super().__init__()
        self.downConv = nn.Conv1d(c_in, c_in, 3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(c_in)
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = F.elu(self.norm(self.downConv(x.permute(0, 2, 1))))
        return self.maxPool(x).transpose(1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.05):
        super().__init__()
        self.attention = AttentionLayer(d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.norm1(x + self.dropout(self.attention(x, x, x)))
        return self.norm2(x + self.dropout(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.05):
        super().__init__()
        self.self_attention = AttentionLayer(d_model, n_heads, mask_flag=True)
        self.cross_attention = AttentionLayer(d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cross):
        x = self.norms[0](x + self.dropout(self.self_attention(x, x, x)))
        x = self.norms[1](x + self.dropout(self.cross_attention(x, cross, cross)))
        return self.norms[2](x + self.dropout(self.ff(x)))


class Informer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.pred_len = args.pred_len
        self.enc_embedding = DataEmbedding(args.enc_in, args.d_model)
        self.dec_embedding = DataEmbedding(args.dec_in, args.d_model)
        self.encoder = nn.ModuleList([EncoderLayer(args.d_model, args.n_heads, args.d_ff) for _ in range(args.e_layers)])
        self.distil = nn.ModuleList([ConvLayer(args.d_model) for _ in range(args.e_layers - 1)]) if args.distil else None
        self.decoder = nn.ModuleList([DecoderLayer(args.d_model, args.n_heads, args.d_ff) for _ in range(args.d_layers)])
        self.projection = nn.Linear(args.d_model, args.c_out)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        for i, layer in enumerate(self.encoder):
            enc_out = layer(enc_out)
            if self.distil is not None and i < len(self.distil):
                enc_out = self.distil[i](enc_out)
        dec_out = self.dec_embedding(x_dec, x_mark_dec)
        for layer in self.decoder:
            dec_out = layer(dec_out, enc_out)
        return self.projection(dec_out)[:, -self.pred_len:, :]


class EarlyStopping:
    def __init__(self, patience=3):
        self.patience, self.counter, self.best, self.early_stop = patience, 0, None, False

    def __call__(self, val_loss):
        if self.best is None or val_loss < self.best:
            self.best, self.counter = val_loss, 0
        else:
            self.counter += 1
            self.early_stop = self.counter >= self.patience


def adjust_learning_rate(optimizer, epoch, args):
    lr = args.learning_rate * (0.5 ** (epoch - 1))
    for group in optimizer.param_groups:
        group["lr"] = lr


class Exp_Informer:
    def __init__(self, args):
        self.args = args
        self.model = Informer(args)

    def _get_data(self, flag):
        data_set = Dataset_Custom(self.args, flag)
        loader = DataLoader(data_set, batch_size=self.args.batch_size, shuffle=(flag == "train"), drop_last=True)
        return data_set, loader

    def _select_optimizer(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.args.learning_rate)

    def _process_one_batch(self, dataset_object, batch_x, batch_y, batch_x_mark, batch_y_mark):
        dec_inp = torch.zeros([batch_y.shape[0], self.args.pred_len, batch_y.shape[-1]])
        dec_inp = torch.cat([batch_y[:, : self.args.label_len, :], dec_inp], dim=1)
        outputs = self.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
        if self.args.inverse:
            outputs = dataset_object.inverse_transform(outputs)
            batch_y = dataset_object.inverse_transform(batch_y)
        outputs = torch.as_tensor(outputs, dtype=torch.float32)
        batch_y = torch.as_tensor(batch_y, dtype=torch.float32)[:, -self.args.pred_len:, :]
        return outputs, batch_y

    def vali(self, vali_data, vali_loader, criterion):
        self.model.eval()
        losses = []
        with torch.no_grad():
            for batch in vali_loader:
                pred, true = self._process_one_batch(vali_data, *batch)
                losses.append(criterion(pred, true).item())
        self.model.train()
        return float(np.mean(losses))

    def train(self):
        train_data, train_loader = self._get_data("train")
        vali_data, vali_loader = self._get_data("val")
        optim = self._select_optimizer()
        criterion = nn.MSELoss()
        early_stopping = EarlyStopping(patience=self.args.patience)
        for epoch in range(self.args.train_epochs):
            self.model.train()
            train_loss = []
            for i, batch in enumerate(train_loader):
                if i >= self.args.max_iters:
                    break
                optim.zero_grad()
                pred, true = self._process_one_batch(train_data, *batch)
                loss = criterion(pred, true)
                train_loss.append(loss.item())
                loss.backward()
                optim.step()
            vali_loss = self.vali(vali_data, vali_loader, criterion)
            print(f"Epoch {epoch + 1} | Train Loss {np.mean(train_loss):.4f} Vali Loss {vali_loss:.4f}")
            early_stopping(vali_loss)
            if early_stopping.early_stop:
                break
            adjust_learning_rate(optim, epoch + 1, self.args)
        return self.model


def get_args():
    p = argparse.ArgumentParser(description="[Informer] Long Sequences Forecasting")
    p.add_argument("--seq_len", type=int, default=48)
    p.add_argument("--label_len", type=int, default=24)
    p.add_argument("--pred_len", type=int, default=12)
    p.add_argument("--enc_in", type=int, default=4)
    p.add_argument("--dec_in", type=int, default=4)
    p.add_argument("--c_out", type=int, default=4)
    p.add_argument("--d_model", type=int, default=32)
    p.add_argument("--n_heads", type=int, default=4)
    p.add_argument("--e_layers", type=int, default=2)
    p.add_argument("--d_layers", type=int, default=1)
    p.add_argument("--d_ff", type=int, default=64)
    p.add_argument("--distil", action="store_false", default=True)
    p.add_argument("--inverse", action="store_true", default=True)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--train_epochs", type=int, default=2)
    p.add_argument("--max_iters", type=int, default=4)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    Exp_Informer(args).train()


if __name__ == "__main__":
    main()
