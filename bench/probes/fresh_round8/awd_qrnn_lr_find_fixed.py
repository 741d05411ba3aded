# expect: clean
# source: https://github.com/fastai/fastai/issues/878
"""AWD-QRNN language model with a fastai(v1)-style Learner, callbacks and LR finder."""
import io
import math
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ----------------------------------------------------------------------------- text/models.py
def dropout_mask(x, sz, p):
    "Return a dropout mask of the same type as x, size sz, with probability p to cancel an element."
    return x.new(*sz).bernoulli_(1 - p).div_(1 - p)


class RNNDropout(nn.Module):
    "Dropout that is consistent on the seq_len dimension."
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.: return x
        return x * dropout_mask(x.data, (1, x.size(1), x.size(2)), self.p)


class WeightDropout(nn.Module):
    "A module that warps another layer in which some weights will be replaced by 0 during training."
    def __init__(self, module, weight_p, layer_names=('weight_hh_l0',)):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        for layer in self.layer_names:
            # Makes a copy of the weights of the selected layers.
            w = getattr(self.module, layer)
            self.register_parameter(f'{layer}_raw', nn.Parameter(w.data))
            self.module._parameters[layer] = F.dropout(w, p=self.weight_p, training=False)

    def _setweights(self):
        "Apply dropout to the raw weights."
        for layer in self.layer_names:
            raw_w = getattr(self, f'{layer}_raw')
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=self.training)

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)

    def reset(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f'{layer}_raw')
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=False)
        if hasattr(self.module, 'reset'): self.module.reset()


class QRNNLayer(nn.Module):
    "Quasi-recurrent layer: a window-2 convolution produces Z/F/O gates, then fo-pooling over time."
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.linear = nn.Linear(2 * input_size, 3 * hidden_size)

    def forward(self, inp, hid=None):
        prev = torch.cat([inp.new_zeros(1, *inp.shape[1:]), inp[:-1]], 0)
        z, f, o = self.linear(torch.cat([inp, prev], -1)).chunk(3, dim=-1)
        z, f, o = z.tanh(), f.sigmoid(), o.sigmoid()
        c = hid if hid is not None else inp.new_zeros(inp.size(1), self.hidden_size)
        cs = []
        for t in range(inp.size(0)):
            c = f[t] * z[t] + (1 - f[t]) * c
            cs.append(c)
        c_all = torch.stack(cs)
        return o * c_all, c_all[-1]


class RNNCore(nn.Module):
    "AWD-LSTM/QRNN inspired by https://arxiv.org/abs/1708.02182."
    initrange = 0.1

    def __init__(self, vocab_sz, emb_sz, n_hid, n_layers, pad_token, hidden_p=0.2, input_p=0.6, weight_p=0.5):
        super().__init__()
        self.bs, self.emb_sz, self.n_hid, self.n_layers = 1, emb_sz, n_hid, n_layers
        self.encoder = nn.Embedding(vocab_sz, emb_sz, padding_idx=pad_token)
        self.rnns = [QRNNLayer(emb_sz if l == 0 else n_hid, n_hid if l != n_layers - 1 else emb_sz)
                     for l in range(n_layers)]
        for rnn in self.rnns: rnn.linear = WeightDropout(rnn.linear, weight_p, layer_names=('weight',))
        self.rnns = nn.ModuleList(self.rnns)
        self.encoder.weight.data.uniform_(-self.initrange, self.initrange)
        self.input_dp = RNNDropout(input_p)
        self.hidden_dps = nn.ModuleList([RNNDropout(hidden_p) for l in range(n_layers)])

    def forward(self, input):
        sl, bs = input.size()
        if bs != self.bs:
            self.bs = bs
            self.reset()
        raw_output = self.input_dp(self.encoder(input))
        new_hidden, outputs = [], []
        for l, (rnn, hid_dp) in enumerate(zip(self.rnns, self.hidden_dps)):
            raw_output, new_h = rnn(raw_output, self.hidden[l])
            new_hidden.append(new_h)
            if l != self.n_layers - 1: raw_output = hid_dp(raw_output)
            outputs.append(raw_output)
        self.hidden = [h.detach() for h in new_hidden]
        return outputs

    def reset(self):
        "Reset the hidden states."
        [r.linear.reset() for r in self.rnns]
        self.hidden = [None for l in range(self.n_layers)]


class LinearDecoder(nn.Module):
    def __init__(self, n_out, n_hid, output_p, tie_encoder=None):
        super().__init__()
        self.decoder = nn.Linear(n_hid, n_out)
        self.output_dp = RNNDropout(output_p)
        if tie_encoder is not None: self.decoder.weight = tie_encoder.weight

    def forward(self, outputs):
        output = self.output_dp(outputs[-1])
        return self.decoder(output.view(-1, output.size(2)))


class SequentialRNN(nn.Sequential):
    "A sequential module that passes the reset call to its children."
    def reset(self):
        for c in self.children():
            if hasattr(c, 'reset'): c.reset()


def get_language_model(vocab_sz, emb_sz, n_hid, n_layers, pad_token=1):
    rnn_enc = RNNCore(vocab_sz, emb_sz, n_hid=n_hid, n_layers=n_layers, pad_token=pad_token)
    model = SequentialRNN(rnn_enc, LinearDecoder(vocab_sz, emb_sz, 0.1, tie_encoder=rnn_enc.encoder))
    model.reset()
    return model


# ----------------------------------------------------------------------------- callback.py / basic_train.py
class Callback:
    def on_train_begin(self, **kw): pass
    def on_batch_end(self, **kw): pass
    def on_train_end(self, **kw): pass


def trainable_params(m):
    "Return list of trainable params in `m`."
    return [p for p in m.parameters() if p.requires_grad]


class Learner:
    def __init__(self, data, model, opt_func=partial(torch.optim.Adam, betas=(0.9, 0.99))):
        self.data, self.model, self.opt_func = data, model, opt_func
        self.loss_func = F.cross_entropy
        rnn = model[0]
        self.layer_groups = [nn.Sequential(rnn.rnns[i], rnn.hidden_dps[i]) for i in range(rnn.n_layers)]
        self.layer_groups.append(nn.Sequential(rnn.encoder, model[1]))
        self._saved = {}

    def create_opt(self, lr):
        "Create optimizer with `lr` learning rate."
        groups = [{'params': trainable_params(g), 'lr': lr} for g in self.layer_groups]
        self.opt = self.opt_func(groups)

    def save(self, name):
        buf = io.BytesIO(); torch.save(self.model.state_dict(), buf); self._saved[name] = buf.getvalue()

    def load(self, name):
        self.model.load_state_dict(torch.load(io.BytesIO(self._saved[name])))

    def fit(self, epochs, lr, callbacks=()):
        self.create_opt(lr)
        for cb in callbacks: cb.on_train_begin(learn=self)
        it, stop = 0, False
        for epoch in range(epochs):
            self.model.train()
            for x, y in self.data:
                loss = self.loss_func(self.model(x), y.view(-1))
                self.opt.zero_grad(); loss.backward(); self.opt.step()
                for cb in callbacks:
                    stop = cb.on_batch_end(iteration=it, loss=loss.item()) or stop
                it += 1
                if stop: break
            if stop: break
        for cb in callbacks: cb.on_train_end()

    def lr_find(self, start_lr=1e-7, end_lr=10, num_it=12):
        self.fit(1, start_lr, callbacks=[LRFinder(self, start_lr, end_lr, num_it)])

    def fit_one_cycle(self, cyc_len, max_lr):
        self.fit(cyc_len, max_lr)


# ----------------------------------------------------------------------------- callbacks/lr_finder.py
class LRFinder(Callback):
    "Causes `learn` to go on a mock training from `start_lr` to `end_lr` for `num_it` iterations."
    def __init__(self, learn, start_lr=1e-7, end_lr=10, num_it=100, stop_div=True):
        self.learn, self.stop_div = learn, stop_div
        self.lrs = np.exp(np.linspace(math.log(start_lr), math.log(end_lr), num_it))
        self.losses = []

    def on_train_begin(self, **kwargs):
        self.learn.save('tmp')
        self.best_loss = float('inf')

    def on_batch_end(self, iteration, loss, **kwargs):
        self.losses.append(loss)
        self.best_loss = min(self.best_loss, loss)
        if iteration + 1 >= len(self.lrs): return True
        for g in self.learn.opt.param_groups: g['lr'] = self.lrs[iteration + 1]
        return self.stop_div and (loss > 4 * self.best_loss or math.isnan(loss))

    def on_train_end(self, **kwargs):
        "Cleanup learn model weights disturbed during LRFinder exploration."
        self.learn.load('tmp')
        if hasattr(self.learn.model, 'reset'): self.learn.model.reset()


def lm_batches(n_tokens=600, vocab=40, bs=4, bptt=10):
    stream = torch.randint(2, vocab, (n_tokens,))
    data = stream[: (n_tokens // bs) * bs].view(bs, -1).t().contiguous()
    return [(data[i:i + bptt], data[i + 1:i + 1 + bptt]) for i in range(0, data.size(0) - bptt - 1, bptt)]


learn = Learner(lm_batches(), get_language_model(vocab_sz=40, emb_sz=16, n_hid=24, n_layers=2))
learn.lr_find()
print("lr_find done:", len(learn.opt.param_groups), "groups")
learn.fit_one_cycle(1, 1e-2)
print("fit_one_cycle done")
