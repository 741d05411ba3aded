# expect: requires_grad_nonleaf
# source: https://github.com/fastai/fastai/issues/1383
"""Language-model learner with an AWD-LSTM (fastai v1 style): train, then unfreeze."""
import warnings
from typing import Collection, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

bn_types = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


# ---------------------------------------------------------------- torch_core
def requires_grad(m: nn.Module, b: Optional[bool] = None) -> Optional[bool]:
    "If `b` is not set return `requires_grad` of first param, else set `requires_grad` on all params as `b`"
    ps = list(m.parameters())
    if not ps: return None
    if b is None: return ps[0].requires_grad
    for p in ps: p.requires_grad = b  # raises


def trainable_params(m: nn.Module) -> List[torch.Tensor]:
    "Return list of trainable params in `m`."
    return list(filter(lambda p: p.requires_grad, m.parameters()))


# ---------------------------------------------------------------- awd_lstm
class WeightDropout(nn.Module):
    "A module that warps another layer in which some weights will be replaced by 0 during training."

    def __init__(self, module: nn.Module, weight_p: float, layer_names: Collection[str] = ['weight_hh_l0']):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        self.idxs = [] if hasattr(self.module, '_flat_weights_names') else None
        for layer in self.layer_names:
            # Makes a copy of the weights of the selected layers.
            w = getattr(self.module, layer)
            self.register_parameter(f'{layer}_raw', nn.Parameter(w.data))
            self.module._parameters[layer] = F.dropout(w, p=self.weight_p, training=False)
            if self.idxs is not None: self.idxs.append(self.module._flat_weights_names.index(layer))
        if isinstance(self.module, nn.RNNBase):
            self.module.flatten_parameters = self._do_nothing

    def _setweights(self):
        "Apply dropout to the raw weights."
        for i, layer in enumerate(self.layer_names):
            raw_w = getattr(self, f'{layer}_raw')
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=self.training)
            if self.idxs is not None: self.module._flat_weights[self.idxs[i]] = self.module._parameters[layer]

    def forward(self, *args):
        self._setweights()
        with warnings.catch_warnings():
            # To avoid the warning that comes because the weights aren't flattened.
            warnings.simplefilter("ignore")
            return self.module.forward(*args)

    def reset(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f'{layer}_raw')
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=False)
        if hasattr(self.module, 'reset'): self.module.reset()

    def _do_nothing(self): pass


class AWD_LSTM(nn.Module):
    "AWD-LSTM inspired by https://arxiv.org/abs/1708.02182."

    def __init__(self, vocab_sz: int, emb_sz: int, n_hid: int, n_layers: int, weight_p: float = 0.5):
        super().__init__()
        self.bs, self.emb_sz, self.n_hid, self.n_layers = 1, emb_sz, n_hid, n_layers
        self.encoder = nn.Embedding(vocab_sz, emb_sz, padding_idx=1)
        self.rnns = nn.ModuleList([WeightDropout(nn.LSTM(emb_sz if l == 0 else n_hid,
                                                         n_hid if l != n_layers - 1 else emb_sz,
                                                         1, batch_first=True), weight_p)
                                   for l in range(n_layers)])
        self.reset()

    def forward(self, input):
        bs, sl = input.size()
        if bs != self.bs:
            self.bs = bs
            self.reset()
        raw_output = self.encoder(input)
        new_hidden = []
        for l, rnn in enumerate(self.rnns):
            raw_output, new_h = rnn(raw_output, self.hidden[l])
            new_hidden.append(new_h)
        self.hidden = [(h.detach(), c.detach()) for h, c in new_hidden]
        return raw_output

    def _one_hidden(self, l):
        nh = self.n_hid if l != self.n_layers - 1 else self.emb_sz
        return torch.zeros(1, self.bs, nh)

    def reset(self):
        "Reset the hidden states."
        for r in self.rnns: r.reset()
        self.hidden = [(self._one_hidden(l), self._one_hidden(l)) for l in range(self.n_layers)]


class SequentialRNN(nn.Sequential):
    "A sequential module that passes the reset call to its children."
    def reset(self):
        for c in self.children():
            if hasattr(c, 'reset'): c.reset()


# ---------------------------------------------------------------- basic_train
class RNNTrainer:
    "`Callback` that resets the model at the beginning of each epoch."
    def __init__(self, learn): self.learn = learn
    def on_epoch_begin(self): self.learn.model.reset()
    def on_train_end(self): pass


class Learner:
    def __init__(self, data, model: nn.Module, layer_groups, lr: float = 1e-3, train_bn: bool = True):
        self.data, self.model, self.layer_groups = data, model, layer_groups
        self.lr, self.train_bn = lr, train_bn
        self.callbacks = [RNNTrainer(self)]
        self.create_opt(lr)

    def create_opt(self, lr: float):
        self.opt = torch.optim.Adam(trainable_params(self.model), lr=lr)

    def freeze_to(self, n: int) -> None:
        "Freeze layers up to layer group `n`."
        for g in self.layer_groups[:n]:
            for l in g:
                if not self.train_bn or not isinstance(l, bn_types): requires_grad(l, False)
        for g in self.layer_groups[n:]: requires_grad(g, True)
        self.create_opt(self.lr)

    def freeze(self) -> None:
        "Freeze up to last layer group."
        self.freeze_to(-1)

    def unfreeze(self):
        "Unfreeze entire model."
        self.freeze_to(0)

    def fit(self, epochs: int) -> None:
        train_dl, valid_dl = self.data
        for epoch in range(epochs):
            for cb in self.callbacks: cb.on_epoch_begin()
            self.model.train()
            for xb, yb in train_dl:
                out = self.model(xb)
                loss = F.cross_entropy(out.reshape(-1, out.size(-1)), yb.reshape(-1))
                loss.backward()
                self.opt.step()
                self.opt.zero_grad()
            if valid_dl is not None:
                self.model.eval()
                with torch.no_grad():
                    for xb, yb in valid_dl: self.model(xb)
            print(f"epoch {epoch}: train loss {loss.item():.4f}")
        for cb in self.callbacks: cb.on_train_end()


def language_model_learner(data, vocab_sz: int) -> Learner:
    encoder = AWD_LSTM(vocab_sz, emb_sz=16, n_hid=24, n_layers=2, weight_p=0.2)
    decoder = nn.Linear(16, vocab_sz)
    model = SequentialRNN(encoder, decoder)
    groups = [[rnn] for rnn in encoder.rnns] + [[encoder.encoder, decoder]]
    return Learner(data, model, [nn.Sequential(*g) for g in groups], lr=3e-3)


if __name__ == "__main__":
    torch.manual_seed(0)
    vocab_sz, bptt = 40, 12
    stream = torch.randint(2, vocab_sz, (4 * 8 * bptt + 1,))
    xs = stream[:-1].view(8, 4, bptt)
    ys = stream[1:].view(8, 4, bptt)
    train_dl = list(zip(xs, ys))
    data = (train_dl, None)  # split_none(): pre-training on the whole corpus

    learn = language_model_learner(data, vocab_sz)
    learn.fit(1)
    learn.unfreeze()
    learn.fit(1)
