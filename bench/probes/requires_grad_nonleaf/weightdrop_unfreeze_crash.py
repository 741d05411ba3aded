# expect: requires_grad_nonleaf
# source: https://github.com/fastai/fastai/issues/2426
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_sz: int = 50
    emb_sz: int = 16
    n_hid: int = 24
    n_classes: int = 3
    seq_len: int = 10
    n_train: int = 96
    valid_pct: float = 0.0  # split_none(): use every sample for training
    bs: int = 16
    weight_p: float = 0.5
    seed: int = 0


class WeightDropout(nn.Module):
    "A module that wraps another layer in which some weights will be replaced by 0 during training."

    def __init__(self, module: nn.Module, weight_p: float, layer_names=("weight_hh",)):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        for layer in self.layer_names:
            w = getattr(self.module, layer)
            self.register_parameter(f"{layer}_raw", nn.Parameter(w.data))
            self.module._parameters[layer] = F.dropout(w, p=self.weight_p, training=False)

    def _setweights(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f"{layer}_raw")
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=self.training)

    def forward(self, x, h):
        self._setweights()
        return self.module(x, h)

    def reset(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f"{layer}_raw")
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=False)


class RNNEncoder(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.encoder = nn.Embedding(cfg.vocab_sz, cfg.emb_sz)
        self.rnns = nn.ModuleList([
            WeightDropout(nn.RNNCell(cfg.emb_sz, cfg.n_hid), cfg.weight_p),
            WeightDropout(nn.RNNCell(cfg.n_hid, cfg.n_hid), cfg.weight_p),
        ])

    def forward(self, tokens):
        x = self.encoder(tokens)
        for rnn in self.rnns:
            h = x.new_zeros(x.size(0), rnn.module.hidden_size)
            outs = []
            for t in range(x.size(1)):
                h = rnn(x[:, t], h)
                outs.append(h)
            x = torch.stack(outs, 1)
        return x


class TextClassifier(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.enc = RNNEncoder(cfg)
        self.head = nn.Sequential(nn.BatchNorm1d(2 * cfg.n_hid), nn.Linear(2 * cfg.n_hid, cfg.n_classes))

    def forward(self, tokens):
        out = self.enc(tokens)
        pooled = torch.cat([out[:, -1], out.max(1)[0]], 1)
        return self.head(pooled)


def requires_grad(m: nn.Module, b: bool):
    ps = list(m.parameters())
    for p in ps:
        p.requires_grad = b  # raises


class Learner:
    def __init__(self, model, train_dl, valid_dl: Optional[list], layer_groups: List[List[nn.Module]]):
        self.model, self.train_dl, self.valid_dl = model, train_dl, valid_dl
        self.layer_groups = layer_groups
        self.create_opt(1e-2)

    def create_opt(self, lr):
        self.opt = torch.optim.Adam([p for p in self.model.parameters() if p.requires_grad], lr=lr)

    def freeze_to(self, n: int):
        for g in self.layer_groups[:n]:
            for l in g:
                requires_grad(l, False)
        for g in self.layer_groups[n:]:
            for l in g:
                requires_grad(l, True)
        self.create_opt(1e-2)

    def freeze(self):
        self.freeze_to(-1)

    def unfreeze(self):
        self.freeze_to(0)

    def validate(self):
        self.model.eval()
        with torch.no_grad():
            losses = [F.cross_entropy(self.model(xb), yb).item() for xb, yb in self.valid_dl]
        return sum(losses) / len(losses)

    def fit(self, epochs: int, lr: float):
        for group in self.opt.param_groups:
            group["lr"] = lr
        for epoch in range(epochs):
            self.model.train()
            total = 0.0
            for xb, yb in self.train_dl:
                loss = F.cross_entropy(self.model(xb), yb)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                total += loss.item()
            msg = f"epoch {epoch} train_loss {total / len(self.train_dl):.4f}"
            if self.valid_dl:
                msg += f" valid_loss {self.validate():.4f}"
            print(msg)


def make_dls(cfg: Config):
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randint(0, cfg.vocab_sz, (cfg.n_train, cfg.seq_len), generator=g)
    y = (x[:, 0] % cfg.n_classes)
    n_valid = int(cfg.valid_pct * cfg.n_train)
    idx = torch.randperm(cfg.n_train, generator=g)
    tr, va = idx[n_valid:], idx[:n_valid]
    batches = lambda ids: [(x[ids[i:i + cfg.bs]], y[ids[i:i + cfg.bs]]) for i in range(0, len(ids), cfg.bs)]
    return batches(tr), (batches(va) if n_valid else None)


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    train_dl, valid_dl = make_dls(cfg)
    model = TextClassifier(cfg)
    groups = [[model.enc.encoder], [model.enc.rnns[0]], [model.enc.rnns[1]], [model.head]]
    learn = Learner(model, train_dl, valid_dl, groups)

    learn.freeze()
    learn.fit(1, 2e-2)
    learn.freeze_to(-2)
    learn.fit(1, 1e-2)
    learn.freeze_to(-3)
    learn.fit(1, 5e-3)
    learn.unfreeze()
    learn.fit(1, 1e-3)


if __name__ == "__main__":
    main()
