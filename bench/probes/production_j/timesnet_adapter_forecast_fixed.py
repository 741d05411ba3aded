# expect: clean
# source: https://github.com/thuml/Time-Series-Library/issues/699
"""Long-term forecasting with TimesNet (Time-Series-Library layout), extended
with a learnable per-variable input adapter placed in front of the backbone.

Exp_Long_Term_Forecast-style driver: train / vali per epoch, early stopping,
learning-rate schedule.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.fft


# ----------------------------------------------------------------- layers/Embed
class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pe = torch.zeros(max_len, d_model).float()
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe.unsqueeze(0))

    def forward(self, x):
        return self.pe[:, :x.size(1)]


class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super().__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1,
                                   padding_mode='circular', bias=False)
        nn.init.kaiming_normal_(self.tokenConv.weight, mode='fan_in', nonlinearity='leaky_relu')

    def forward(self, x):
        return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)


class TimeFeatureEmbedding(nn.Module):
    def __init__(self, d_model, d_inp=4):
        super().__init__()
        self.embed = nn.Linear(d_inp, d_model, bias=False)

    def forward(self, x):
        return self.embed(x)


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.1):
        super().__init__()
        self.value_embedding = TokenEmbedding(c_in, d_model)
        self.position_embedding = PositionalEmbedding(d_model)
        self.temporal_embedding = TimeFeatureEmbedding(d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x) + self.temporal_embedding(x_mark) + self.position_embedding(x)
        return self.dropout(x)


# ----------------------------------------------------------- layers/Conv_Blocks
class Inception_Block_V1(nn.Module):
    def __init__(self, in_channels, out_channels, num_kernels=6):
        super().__init__()
        self.kernels = nn.ModuleList([nn.Conv2d(in_channels, out_channels, kernel_size=2 * i + 1, padding=i)
                                      for i in range(num_kernels)])

    def forward(self, x):
        return torch.stack([k(x) for k in self.kernels], dim=-1).mean(-1)


# ---------------------------------------------------------------- models/TimesNet
def FFT_for_Period(x, k=2):
    xf = torch.fft.rfft(x, dim=1)
    frequency_list = abs(xf).mean(0).mean(-1)
    frequency_list[0] = 0
    _, top_list = torch.topk(frequency_list, k)
    top_list = top_list.detach().cpu().numpy()
    period = x.shape[1] // top_list
    return period, abs(xf).mean(-1)[:, top_list]


class TimesBlock(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.seq_len, self.pred_len, self.k = configs.seq_len, configs.pred_len, configs.top_k
        self.conv = nn.Sequential(
            Inception_Block_V1(configs.d_model, configs.d_ff, num_kernels=configs.num_kernels),
            nn.GELU(),
            Inception_Block_V1(configs.d_ff, configs.d_model, num_kernels=configs.num_kernels))

    def forward(self, x):
        B, T, N = x.size()
        period_list, period_weight = FFT_for_Period(x, self.k)
        res = []
        total = self.seq_len + self.pred_len
        for i in range(self.k):
            period = int(period_list[i])
            if total % period != 0:
                length = ((total // period) + 1) * period
                out = torch.cat([x, torch.zeros([B, length - total, N])], dim=1)
            else:
                length, out = total, x
            out = out.reshape(B, length // period, period, N).permute(0, 3, 1, 2).contiguous()
            out = self.conv(out)
            out = out.permute(0, 2, 3, 1).reshape(B, -1, N)
            res.append(out[:, :total, :])
        res = torch.stack(res, dim=-1)
        period_weight = F.softmax(period_weight, dim=1).unsqueeze(1).unsqueeze(1).repeat(1, T, N, 1)
        return torch.sum(res * period_weight, -1) + x


class Model(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.seq_len, self.pred_len = configs.seq_len, configs.pred_len
        self.model = nn.ModuleList([TimesBlock(configs) for _ in range(configs.e_layers)])
        self.enc_embedding = DataEmbedding(configs.enc_in, configs.d_model, configs.dropout)
        self.layer = configs.e_layers
        self.layer_norm = nn.LayerNorm(configs.d_model)
        self.predict_linear = nn.Linear(self.seq_len, self.pred_len + self.seq_len)
        self.projection = nn.Linear(configs.d_model, configs.c_out, bias=True)

    def forecast(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        # Normalization from Non-stationary Transformer
        means = x_enc.mean(1, keepdim=True).detach()
        x_enc = x_enc.sub(means)
        stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
        x_enc = x_enc.div(stdev)

        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        enc_out = self.predict_linear(enc_out.permute(0, 2, 1)).permute(0, 2, 1)
        for i in range(self.layer):
            enc_out = self.layer_norm(self.model[i](enc_out))
        dec_out = self.projection(enc_out)

        # De-Normalization from Non-stationary Transformer
        dec_out = dec_out * stdev[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1)
        dec_out = dec_out + means[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1)
        return dec_out

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        dec_out = self.forecast(x_enc, x_mark_enc, x_dec, x_mark_dec)
        return dec_out[:, -self.pred_len:, :]


class ChannelAdapter(nn.Module):
    """Learnable per-variable affine map + cross-variable mixing, trained jointly."""

    def __init__(self, n_vars):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n_vars))
        self.shift = nn.Parameter(torch.zeros(n_vars))
        self.mix = nn.Linear(n_vars, n_vars)
        nn.init.eye_(self.mix.weight)
        nn.init.zeros_(self.mix.bias)

    def forward(self, x):
        return self.mix(x * self.scale + self.shift)


class AdaptedForecaster(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.adapter = ChannelAdapter(configs.enc_in) if configs.use_adapter else None
        self.backbone = Model(configs)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        if self.adapter is not None:
            x_enc = self.adapter(x_enc)
        return self.backbone(x_enc, x_mark_enc, x_dec, x_mark_dec)


# ------------------------------------------------------------------ exp driver
def make_series(n_steps, n_vars, rng):
    t = np.arange(n_steps)
    cols = [np.sin(2 * np.pi * t / (8 + 4 * v)) + 0.05 * t / n_steps + 0.1 * rng.randn(n_steps)
            for v in range(n_vars)]
    data = np.stack(cols, 1).astype(np.float32)
    marks = np.stack([(t % 24) / 23 - .5, (t % 7) / 6 - .5, (t % 30) / 29 - .5, (t % 12) / 11 - .5], 1)
    return data, marks.astype(np.float32)


def windows(data, marks, cfg, idx):
    s, e = idx, idx + cfg.seq_len
    r_s, r_e = e - cfg.label_len, e + cfg.pred_len
    return data[s:e], data[r_s:r_e], marks[s:e], marks[r_s:r_e]


def batches(data, marks, cfg, starts):
    for b in range(0, len(starts), cfg.batch_size):
        items = [windows(data, marks, cfg, i) for i in starts[b:b + cfg.batch_size]]
        yield [torch.from_numpy(np.stack(z)) for z in zip(*items)]


class EarlyStopping:
    def __init__(self, patience=3):
        self.patience, self.counter, self.best = patience, 0, None
        self.early_stop = False

    def __call__(self, val_loss):
        if self.best is None or val_loss < self.best:
            self.best, self.counter = val_loss, 0
        else:
            self.counter += 1
            self.early_stop = self.counter >= self.patience


class Exp_Long_Term_Forecast:
    def __init__(self, args):
        self.args = args
        self.model = AdaptedForecaster(args)
        self.optim = torch.optim.Adam(self.model.parameters(), lr=args.learning_rate)
        self.criterion = nn.MSELoss()

    def _decoder_input(self, batch_y):
        dec_inp = torch.zeros_like(batch_y[:, -self.args.pred_len:, :])
        return torch.cat([batch_y[:, :self.args.label_len, :], dec_inp], dim=1)

    def vali(self, data, marks, starts):
        self.model.eval()
        losses = []
        with torch.no_grad():
            for bx, by, bxm, bym in batches(data, marks, self.args, starts):
                out = self.model(bx, bxm, self._decoder_input(by), bym)
                losses.append(self.criterion(out, by[:, -self.args.pred_len:]).item())
        self.model.train()
        return float(np.mean(losses))

    def train(self, data, marks, train_starts, val_starts):
        stopper = EarlyStopping(self.args.patience)
        for epoch in range(self.args.train_epochs):
            self.model.train()
            train_loss = []
            for bx, by, bxm, bym in batches(data, marks, self.args, train_starts):
                self.optim.zero_grad()
                outputs = self.model(bx, bxm, self._decoder_input(by), bym)
                loss = self.criterion(outputs, by[:, -self.args.pred_len:])
                train_loss.append(loss.item())
                loss.backward()
                self.optim.step()
            vali_loss = self.vali(data, marks, val_starts)
            print(f"Epoch {epoch + 1} | Train {np.mean(train_loss):.4f} Vali {vali_loss:.4f}")
            stopper(vali_loss)
            if stopper.early_stop:
                break
            for g in self.optim.param_groups:
                g['lr'] = self.args.learning_rate * (0.5 ** epoch)
        return self.model


def main():
    args = SimpleNamespace(task_name='long_term_forecast', seq_len=24, label_len=12, pred_len=12,
                           enc_in=3, c_out=3, d_model=16, d_ff=16, top_k=2, num_kernels=2,
                           e_layers=1, dropout=0.1, batch_size=8, learning_rate=1e-3,
                           train_epochs=2, patience=3, use_adapter=True, seed=2021)
    torch.manual_seed(args.seed)
    rng = np.random.RandomState(args.seed)
    data, marks = make_series(200, args.enc_in, rng)
    span = args.seq_len + args.pred_len
    train_starts = list(range(0, 120 - span, 3))
    val_starts = list(range(120, 200 - span, 4))
    Exp_Long_Term_Forecast(args).train(data, marks, train_starts, val_starts)


main()
