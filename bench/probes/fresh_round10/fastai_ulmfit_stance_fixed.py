# expect: clean
# source: https://github.com/fastai/fastai/issues/1909
"""ULMFiT tweet-stance pipeline, language-model stage, written against a
fastai-v1-like core: AWD-LSTM (embedding dropout, weight-dropped hidden-to-hidden
matrices, RNN dropout), layer groups, a Learner with freeze/freeze_to/unfreeze,
a one-cycle scheduler callback and a recorder; fine-tuned with gradual
unfreezing on a synthetic tweet corpus."""
import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

# ------------------------------------------------------------ torch_core
bn_types = (nn.BatchNorm1d, nn.BatchNorm2d)


def requires_grad(m, b=None):
    "If `b` is not set return `requires_grad` of first param, else set `requires_grad` on all params as `b`"
    ps = list(m.parameters())
    if not ps: return None
    if b is None: return ps[0].requires_grad
    for p in ps: p.requires_grad = b


def trainable_params(m):
    return [p for p in m.parameters() if p.requires_grad]


# ----------------------------------------------------------- text/models
def dropout_mask(x, sz, p):
    return x.new(*sz).bernoulli_(1 - p).div_(1 - p)


class RNNDropout(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.: return x
        return x * dropout_mask(x.data, (x.size(0), 1, x.size(2)), self.p)


class WeightDropout(nn.Module):
    "A module that warps another layer in which some weights will be replaced by 0 during training."
    def __init__(self, module, weight_p, layer_names=('weight_hh_l0',)):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        for layer in self.layer_names:
            w = getattr(self.module, layer)
            delattr(self.module, layer)
            self.register_parameter(f'{layer}_raw', nn.Parameter(w.data))
            setattr(self.module, layer, F.dropout(w.data, p=self.weight_p, training=False))

    def _setweights(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f'{layer}_raw')
            setattr(self.module, layer, F.dropout(raw_w, p=self.weight_p, training=self.training))

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)


class ElmanRNN(nn.Module):
    "Single-layer tanh RNN exposing `weight_hh_l0` like `nn.RNN`."
    def __init__(self, n_in, n_hid):
        super().__init__()
        self.weight_ih_l0 = nn.Parameter(torch.randn(n_hid, n_in) / math.sqrt(n_in))
        self.weight_hh_l0 = nn.Parameter(torch.randn(n_hid, n_hid) / math.sqrt(n_hid))
        self.bias_l0 = nn.Parameter(torch.zeros(n_hid))

    def forward(self, x):
        h = x.new_zeros(x.size(0), self.weight_hh_l0.size(0))
        outs = []
        for t in range(x.size(1)):
            h = torch.tanh(x[:, t] @ self.weight_ih_l0.t() + h @ self.weight_hh_l0.t() + self.bias_l0)
            outs.append(h)
        return torch.stack(outs, 1)


class AWD_LSTM(nn.Module):
    def __init__(self, vocab_sz, emb_sz, n_hid, n_layers, hidden_p=0.2, input_p=0.6, weight_p=0.5):
        super().__init__()
        self.encoder = nn.Embedding(vocab_sz, emb_sz)
        self.input_dp = RNNDropout(input_p)
        sizes = [emb_sz] + [n_hid] * (n_layers - 1) + [emb_sz]
        self.rnns = nn.ModuleList(WeightDropout(ElmanRNN(sizes[l], sizes[l + 1]), weight_p)
                                  for l in range(n_layers))
        self.hidden_dps = nn.ModuleList(RNNDropout(hidden_p) for _ in range(n_layers))

    def forward(self, x):
        out = self.input_dp(self.encoder(x))
        for rnn, hid_dp in zip(self.rnns, self.hidden_dps):
            out = hid_dp(rnn(out))
        return out


class LinearDecoder(nn.Module):
    def __init__(self, n_out, n_hid, tie_encoder=None):
        super().__init__()
        self.decoder = nn.Linear(n_hid, n_out)
        if tie_encoder is not None: self.decoder.weight = tie_encoder.weight

    def forward(self, x):
        return self.decoder(x)


# ------------------------------------------------------------ callbacks
class OneCycleScheduler:
    def __init__(self, learn, lr_max, pct_start=0.3):
        self.learn, self.lr_max, self.pct_start = learn, lr_max, pct_start

    def on_train_begin(self, n_iter):
        self.n_iter, self.it = n_iter, 0

    def on_batch_begin(self):
        pct = self.it / max(1, self.n_iter - 1)
        if pct < self.pct_start:
            lr = self.lr_max / 25 + (self.lr_max - self.lr_max / 25) * pct / self.pct_start
        else:
            lr = self.lr_max * (1 + math.cos(math.pi * (pct - self.pct_start) / (1 - self.pct_start))) / 2
        for g in self.learn.opt.param_groups: g['lr'] = lr
        self.it += 1


class Recorder:
    def __init__(self):
        self.losses, self.lrs = [], []

    def on_batch_end(self, loss, lr):
        self.losses.append(loss)
        self.lrs.append(lr)


# ------------------------------------------------------------ basic_train
class Learner:
    def __init__(self, data, model, layer_groups, opt_func=partial(torch.optim.Adam, betas=(0.8, 0.99)),
                 loss_func=F.cross_entropy, train_bn=True):
        self.data, self.model, self.layer_groups = data, model, layer_groups
        self.opt_func, self.loss_func, self.train_bn = opt_func, loss_func, train_bn
        self.recorder = Recorder()
        self.opt = None

    def create_opt(self, lr):
        self.opt = self.opt_func(trainable_params(self.model), lr=lr)

    def freeze_to(self, n):
        for g in self.layer_groups[:n]:
            for l in g:
                if not self.train_bn or not isinstance(l, bn_types): requires_grad(l, False)
        for g in self.layer_groups[n:]: requires_grad(g, True)
        self.create_opt(1e-3)

    def freeze(self):
        self.freeze_to(-1)

    def unfreeze(self):
        self.freeze_to(0)

    def fit_one_cycle(self, cyc_len, max_lr):
        sched = OneCycleScheduler(self, max_lr)
        sched.on_train_begin(cyc_len * len(self.data))
        self.model.train()
        for epoch in range(cyc_len):
            for xb, yb in self.data:
                sched.on_batch_begin()
                out = self.model(xb)
                loss = self.loss_func(out.reshape(-1, out.size(-1)), yb.reshape(-1))
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.recorder.on_batch_end(loss.item(), self.opt.param_groups[0]['lr'])
            print("epoch %d  train_loss %.4f" % (epoch, self.recorder.losses[-1]))


def language_model_learner(data, vocab_sz, emb_sz=24, n_hid=48, n_layers=3, drop_mult=0.3):
    encoder = AWD_LSTM(vocab_sz, emb_sz, n_hid, n_layers, hidden_p=0.15 * drop_mult,
                       input_p=0.25 * drop_mult, weight_p=0.2 * drop_mult)
    model = nn.Sequential(encoder, LinearDecoder(vocab_sz, emb_sz, tie_encoder=encoder.encoder))
    groups = [[rnn, dp] for rnn, dp in zip(encoder.rnns, encoder.hidden_dps)]
    groups.append([encoder.encoder, model[1]])
    learn = Learner(data, model, [nn.ModuleList(g) for g in groups])
    learn.freeze()
    return learn


def make_tweet_lm_data(vocab_sz=60, n_batches=4, bs=8, bptt=10):
    g = torch.Generator().manual_seed(1)
    stream = torch.randint(0, vocab_sz, (n_batches * bs * (bptt + 1),), generator=g)
    chunks = stream.view(n_batches, bs, bptt + 1)
    return [(c[:, :-1], c[:, 1:]) for c in chunks]


if __name__ == "__main__":
    data_lm = make_tweet_lm_data()
    learn = language_model_learner(data_lm, vocab_sz=60, drop_mult=0.7)
    learn.fit_one_cycle(1, 1e-2)
    learn.freeze_to(-2)
    learn.fit_one_cycle(1, 5e-3)
    learn.unfreeze()
    learn.fit_one_cycle(1, 1e-3)
    print("recorded %d batches, final lr %.2e" % (len(learn.recorder.losses), learn.recorder.lrs[-1]))
