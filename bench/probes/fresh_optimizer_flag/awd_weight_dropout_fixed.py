# expect: clean
# source: https://github.com/pytorch/pytorch/issues/38198
import warnings
from typing import Collection

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

config = dict(vocab_sz=50, emb_sz=32, n_hid=48, n_layers=2, bptt=12, bs=8,
              output_p=0.1, hidden_p=0.15, input_p=0.25, weight_p=0.2,
              lr=3e-3, wd=0.01, warmup_epochs=1, epochs=2)


class RNNDropout(nn.Module):
    "Dropout with probability `p` that is consistent on the seq_len dimension."

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.:
            return x
        m = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1 - self.p)
        return x * m / (1 - self.p)


class WeightDropout(nn.Module):
    "A module that warps another layer in which some weights will be replaced by 0 during training."

    def __init__(self, module: nn.Module, weight_p: float, layer_names: Collection[str] = ['weight_hh_l0']):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        for layer in self.layer_names:
            #Makes a copy of the weights of the selected layers.
            w = getattr(self.module, layer)
            delattr(self.module, layer)
            self.register_parameter(f'{layer}_raw', nn.Parameter(w.data))
            setattr(self.module, layer, w.clone())
        if isinstance(self.module, (nn.RNNBase, nn.modules.rnn.RNNBase)):
            self.module.flatten_parameters = self._do_nothing

    def _setweights(self):
        "Apply dropout to the raw weights."
        for i, layer in enumerate(self.layer_names):
            raw_w = getattr(self, f'{layer}_raw')
            if self.training: w = F.dropout(raw_w, p=self.weight_p)
            else: w = raw_w.clone()
            setattr(self.module, layer, w)

    def forward(self, *args):
        self._setweights()
        with warnings.catch_warnings():
            #To avoid the warning that comes because the weights aren't flattened.
            warnings.simplefilter("ignore")
            return self.module.forward(*args)

    def _do_nothing(self): pass


class AWD_LSTM(nn.Module):
    def __init__(self, vocab_sz, emb_sz, n_hid, n_layers, hidden_p, input_p, weight_p, **kwargs):
        super().__init__()
        self.encoder = nn.Embedding(vocab_sz, emb_sz)
        self.encoder.weight.data.uniform_(-0.1, 0.1)
        self.rnns = nn.ModuleList([
            WeightDropout(nn.LSTM(emb_sz if l == 0 else n_hid, n_hid if l != n_layers - 1 else emb_sz, 1,
                                  batch_first=True), weight_p)
            for l in range(n_layers)])
        self.input_dp = RNNDropout(input_p)
        self.hidden_dps = nn.ModuleList([RNNDropout(hidden_p) for _ in range(n_layers)])

    def forward(self, inp):
        output = self.input_dp(self.encoder(inp))
        for rnn, hid_dp in zip(self.rnns, self.hidden_dps):
            output, _ = rnn(output)
            output = hid_dp(output)
        return output


class LinearDecoder(nn.Module):
    def __init__(self, n_out, n_hid, output_p, tie_encoder=None):
        super().__init__()
        self.decoder = nn.Linear(n_hid, n_out)
        self.output_dp = RNNDropout(output_p)
        if tie_encoder is not None:
            self.decoder.weight = tie_encoder.weight

    def forward(self, x):
        return self.decoder(self.output_dp(x))


def get_language_model(cfg):
    encoder = AWD_LSTM(**cfg)
    decoder = LinearDecoder(cfg['vocab_sz'], cfg['emb_sz'], cfg['output_p'], tie_encoder=encoder.encoder)
    return nn.Sequential(encoder, decoder)


def make_lm_batches(n_tokens, cfg, seed):
    rng = np.random.RandomState(seed)
    stream = torch.from_numpy(rng.randint(0, cfg['vocab_sz'], size=n_tokens)).long()
    n = (len(stream) - 1) // (cfg['bs'] * cfg['bptt']) * cfg['bs'] * cfg['bptt']
    x = stream[:n].view(cfg['bs'], -1)
    y = stream[1:n + 1].view(cfg['bs'], -1)
    return [(x[:, i:i + cfg['bptt']], y[:, i:i + cfg['bptt']]) for i in range(0, x.size(1), cfg['bptt'])]


class LMLearner:
    def __init__(self, model, train_dl, valid_dl, wd=0.):
        self.model, self.train_dl, self.valid_dl, self.wd = model, train_dl, valid_dl, wd
        self.opt = None

    def create_opt(self, lr):
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr, weight_decay=self.wd)

    def loss_batch(self, xb, yb):
        out = self.model(xb)
        return F.cross_entropy(out.reshape(-1, out.size(-1)), yb.reshape(-1))

    def fit(self, epochs, lr):
        self.create_opt(lr)
        for epoch in range(epochs):
            self.model.train()
            losses = []
            for xb, yb in self.train_dl:
                loss = self.loss_batch(xb, yb)
                loss.backward()
                nn.utils.clip_grad_norm_(self.model.parameters(), 0.4)
                self.opt.step()
                self.opt.zero_grad()
                losses.append(loss.item())
            print(f'epoch {epoch} lr {lr:.0e} train_loss {np.mean(losses):.4f}')

    def validate(self):
        self.model.eval()
        with torch.no_grad():
            return np.mean([self.loss_batch(xb, yb).item() for xb, yb in self.valid_dl])


if __name__ == '__main__':
    torch.manual_seed(42)
    train_dl = make_lm_batches(2000, config, seed=0)
    valid_dl = make_lm_batches(500, config, seed=1)
    learn = LMLearner(get_language_model(config), train_dl, valid_dl, wd=config['wd'])
    learn.fit(config['warmup_epochs'], lr=config['lr'] * 3)
    learn.fit(config['epochs'], lr=config['lr'])
    print('valid_loss', learn.validate())
