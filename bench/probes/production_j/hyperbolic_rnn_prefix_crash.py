# expect: leaf_inplace
# source: https://github.com/ferrine/hyrnn/issues/11
"""Hyperbolic RNN (Ganea et al. 2018) on a synthetic prefix-detection task.

A compact re-implementation of the pieces of geoopt / hyrnn that the model needs:
Poincare-ball math, a Sphere manifold, ManifoldParameter with projection,
RiemannianAdam, a Mobius GRU cell, and the hyperbolic multiclass logistic
regression layer (MobiusDist2Hyperplane) selected by `decision_type="hyp"`.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MIN_NORM = 1e-15


# ------------------------------------------------------------- geoopt.utils
def copy_or_set_(dest, source):
    """Copy or inplace set from source to dest (keeps the Parameter object)."""
    if dest.stride() != source.stride():
        return dest.copy_(source)
    else:
        return dest.set_(source)  # raises


# --------------------------------------------------------- geoopt.manifolds
class Manifold:
    def projx(self, x):
        raise NotImplementedError

    def proju(self, x, u):
        raise NotImplementedError

    def retr(self, x, u):
        return self.projx(x + u)

    def egrad2rgrad(self, x, u):
        return self.proju(x, u)


class Euclidean(Manifold):
    def projx(self, x):
        return x

    def proju(self, x, u):
        return u


class Sphere(Manifold):
    def projx(self, x):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)

    def proju(self, x, u):
        return u - (x * u).sum(dim=-1, keepdim=True) * x


class PoincareBall(Manifold):
    def __init__(self, c=1.0):
        self.c = torch.as_tensor(c)

    def projx(self, x, eps=1e-5):
        norm = x.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)
        maxnorm = (1 - eps) / (self.c ** 0.5)
        return torch.where(norm > maxnorm, x / norm * maxnorm, x)

    def lambda_x(self, x):
        return 2 / (1 - self.c * x.pow(2).sum(-1, keepdim=True)).clamp_min(MIN_NORM)

    def proju(self, x, u):
        return u

    def egrad2rgrad(self, x, u):
        return u / self.lambda_x(x) ** 2

    def retr(self, x, u):
        return self.projx(x + u)


# ---------------------------------------------------------------- pmath
def artanh(x):
    x = x.clamp(-1 + 1e-5, 1 - 1e-5)
    return 0.5 * (torch.log1p(x) - torch.log1p(-x))


def expmap0(u, c):
    sqrt_c = c ** 0.5
    u_norm = u.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)
    return torch.tanh(sqrt_c * u_norm) * u / (sqrt_c * u_norm)


def logmap0(y, c):
    sqrt_c = c ** 0.5
    y_norm = y.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)
    return y / y_norm / sqrt_c * artanh(sqrt_c * y_norm)


def mobius_add(x, y, c):
    x2 = x.pow(2).sum(dim=-1, keepdim=True)
    y2 = y.pow(2).sum(dim=-1, keepdim=True)
    xy = (x * y).sum(dim=-1, keepdim=True)
    num = (1 + 2 * c * xy + c * y2) * x + (1 - c * x2) * y
    denom = 1 + 2 * c * xy + c ** 2 * x2 * y2
    return num / denom.clamp_min(MIN_NORM)


def mobius_matvec(m, x, c):
    return expmap0(logmap0(x, c) @ m.transpose(-1, -2), c)


def mobius_pointwise_mul(w, x, c):
    return expmap0(w * logmap0(x, c), c)


def dist2plane(x, p, a, c, signed=True):
    sqrt_c = c ** 0.5
    diff = mobius_add(-p, x, c)
    diff_norm2 = diff.pow(2).sum(dim=-1).clamp_min(MIN_NORM)
    sc_diff_a = (diff * a).sum(dim=-1)
    if not signed:
        sc_diff_a = sc_diff_a.abs()
    a_norm = a.norm(dim=-1).clamp_min(MIN_NORM)
    num = 2 * sqrt_c * sc_diff_a
    denom = (1 - c * diff_norm2) * a_norm
    return torch.asinh(num / denom.clamp_min(MIN_NORM)) / sqrt_c


# ------------------------------------------------------------ geoopt.tensor
class ManifoldParameter(nn.Parameter):
    def __new__(cls, data=None, manifold=None, requires_grad=True):
        if data is None:
            data = torch.empty(0)
        instance = torch.Tensor._make_subclass(cls, data, requires_grad)
        instance.manifold = manifold or Euclidean()
        return instance

    def proj_(self):
        return copy_or_set_(self, self.manifold.projx(self))


class RiemannianAdam(torch.optim.Adam):
    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                manifold = getattr(p, "manifold", Euclidean())
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                grad = manifold.egrad2rgrad(p, p.grad)
                state["exp_avg"].mul_(b1).add_(grad, alpha=1 - b1)
                state["exp_avg_sq"].mul_(b2).add_(grad * grad, alpha=1 - b2)
                bc1, bc2 = 1 - b1 ** state["step"], 1 - b2 ** state["step"]
                direction = state["exp_avg"] / bc1 / ((state["exp_avg_sq"] / bc2).sqrt() + eps)
                copy_or_set_(p, manifold.retr(p, -lr * direction))


# ---------------------------------------------------------------- hyrnn.nets
class MobiusDist2Hyperplane(nn.Module):
    def __init__(self, in_features, out_features, c=1.0):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.ball = ball = PoincareBall(c=c)
        self.sphere = sphere = Sphere()
        self.scale = nn.Parameter(torch.zeros(out_features))
        point = torch.randn(out_features, in_features) / 4
        point = expmap0(point, c=ball.c)
        tangent = torch.randn(out_features, in_features)
        self.point = ManifoldParameter(point, manifold=ball)
        self.tangent = ManifoldParameter(tangent, manifold=sphere).proj_()

    def forward(self, input):
        input = input.unsqueeze(-2)
        distance = dist2plane(x=input, p=self.point, a=self.tangent, c=self.ball.c, signed=True)
        return distance * self.scale.exp()


class MobiusGRUCell(nn.Module):
    def __init__(self, input_size, hidden_size, c=1.0):
        super().__init__()
        self.c = torch.as_tensor(c)
        self.w_ih = nn.Parameter(torch.randn(3, hidden_size, input_size) * 0.1)
        self.w_hh = nn.Parameter(torch.randn(3, hidden_size, hidden_size) * 0.1)
        self.bias = ManifoldParameter(torch.zeros(3, hidden_size), manifold=PoincareBall(c))

    def transition(self, W, h, U, x, b):
        w_otimes_h = mobius_matvec(W, h, self.c)
        u_otimes_x = mobius_matvec(U, x, self.c)
        return mobius_add(mobius_add(w_otimes_h, u_otimes_x, self.c), b, self.c)

    def forward(self, x, h):
        z = torch.sigmoid(logmap0(self.transition(self.w_hh[0], h, self.w_ih[0], x, self.bias[0]), self.c))
        r = torch.sigmoid(logmap0(self.transition(self.w_hh[1], h, self.w_ih[1], x, self.bias[1]), self.c))
        rh = mobius_pointwise_mul(r, h, self.c)
        h_tilde = self.transition(self.w_hh[2], rh, self.w_ih[2], x, self.bias[2])
        delta_h = mobius_add(-h, h_tilde, self.c)
        return mobius_add(h, mobius_pointwise_mul(z, delta_h, self.c), self.c)


class RNNBase(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_classes, c, decision_type):
        super().__init__()
        self.c = torch.as_tensor(c)
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.cell = MobiusGRUCell(embedding_dim, hidden_dim, c)
        if decision_type == "eucl":
            self.projector = nn.Linear(hidden_dim, num_classes)
        elif decision_type == "hyp":
            self.projector = MobiusDist2Hyperplane(hidden_dim, num_classes, c)
        else:
            raise NotImplementedError(decision_type)
        self.decision_type = decision_type

    def forward(self, tokens):
        x = expmap0(self.embedding(tokens) * 0.1, self.c)
        h = torch.zeros(tokens.shape[0], self.cell.w_hh.shape[-1])
        for t in range(tokens.shape[1]):
            h = self.cell(x[:, t], h)
        if self.decision_type == "eucl":
            h = logmap0(h, self.c)
        return self.projector(h)


@dataclass
class ExpConfig:
    vocab: int = 12
    seq_len: int = 8
    embedding_dim: int = 6
    hidden_dim: int = 8
    num_classes: int = 2
    c: float = 1.0
    decision_type: str = "hyp"
    lr: float = 5e-3
    epochs: int = 2
    batch: int = 16
    seed: int = 42


def prefix_dataset(cfg, n, rng):
    """Label 1 iff the second half of the sequence repeats a prefix of the first."""
    xs, ys = [], []
    for _ in range(n):
        first = rng.randint(1, cfg.vocab, size=cfg.seq_len // 2)
        if rng.rand() < 0.5:
            second, y = first.copy(), 1
        else:
            second, y = rng.randint(1, cfg.vocab, size=cfg.seq_len // 2), 0
        xs.append(np.concatenate([first, second]))
        ys.append(y)
    return torch.tensor(np.array(xs)).long(), torch.tensor(ys).long()


def main():
    cfg = ExpConfig()
    torch.manual_seed(cfg.seed)
    rng = np.random.RandomState(cfg.seed)
    x_tr, y_tr = prefix_dataset(cfg, 64, rng)
    x_te, y_te = prefix_dataset(cfg, 32, rng)
    model = RNNBase(cfg.vocab, cfg.embedding_dim, cfg.hidden_dim, cfg.num_classes,
                    cfg.c, cfg.decision_type)
    optimizer = RiemannianAdam(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        model.train()
        for b in range(0, len(y_tr), cfg.batch):
            optimizer.zero_grad()
            logits = model(x_tr[b:b + cfg.batch])
            loss = F.cross_entropy(logits, y_tr[b:b + cfg.batch])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            acc = (model(x_te).argmax(-1) == y_te).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.4f} test acc {acc:.3f}")


main()
