# expect: clean
# source: https://github.com/pyro-ppl/pyro/pull/2388
"""Compiled sequential importance sampling (CSIS) with a tiny param store.

A pyro-like mini framework: a global `ParamStore`, a `param_capture` context
that records which parameters the guide touched, a generative model with a
latent slope/offset, an amortized guide network, and a `CSIS` inference
object with `loss_and_grads`, `step`, `validation_loss` and importance
sampling at the end.  Synthetic regression data, CPU only.
"""
import contextlib
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.distributions import Normal

cfg = SimpleNamespace(n_points=8, hidden=32, lr=3e-3, batch=16, steps=25, fixed_guide_scale=True,
                      guide_scale=0.3, n_importance=64, seed=0)


# ----------------------------------------------------------------------------
# param store
# ----------------------------------------------------------------------------
class ParamStore(object):
    def __init__(self):
        self._params = {}
        self._captures = []

    def get_param(self, name, init_fn):
        if name not in self._params:
            self._params[name] = init_fn().detach().requires_grad_(True)
        p = self._params[name]
        for cap in self._captures:
            cap[name] = p
        return p

    def parameters(self):
        return list(self._params.values())

    def named_parameters(self):
        return dict(self._params)


_PARAM_STORE = ParamStore()


def param(name, init_fn):
    return _PARAM_STORE.get_param(name, init_fn)


@contextlib.contextmanager
def param_capture():
    captured = {}
    _PARAM_STORE._captures.append(captured)
    try:
        yield captured
    finally:
        _PARAM_STORE._captures.remove(captured)


# ----------------------------------------------------------------------------
# model / guide
# ----------------------------------------------------------------------------
XS = torch.linspace(-1.0, 1.0, cfg.n_points)


def model():
    slope = Normal(0.0, 1.0).sample()
    offset = Normal(0.0, 1.0).sample()
    ys = Normal(slope * XS + offset, 0.1).sample()
    return {"slope": slope, "offset": offset, "ys": ys}


def _init(*shape, scale=0.1):
    return lambda: torch.randn(*shape) * scale


def guide_distribution(ys):
    w1 = param("guide.w1", _init(cfg.n_points, cfg.hidden))
    b1 = param("guide.b1", lambda: torch.zeros(cfg.hidden))
    w_loc = param("guide.w_loc", _init(cfg.hidden, 2))
    w_scale = param("guide.w_scale", _init(cfg.hidden, 2))
    h = torch.tanh(ys @ w1 + b1)
    loc = h @ w_loc
    if cfg.fixed_guide_scale:
        scale = torch.full_like(loc, cfg.guide_scale)
    else:
        scale = F.softplus(h @ w_scale) + 1e-3
    return Normal(loc, scale)


def guide_log_prob(trace):
    dist = guide_distribution(trace["ys"])
    latents = torch.stack([trace["slope"], trace["offset"]])
    return dist.log_prob(latents).sum()


# ----------------------------------------------------------------------------
# inference
# ----------------------------------------------------------------------------
class CSIS(object):
    def __init__(self, model, guide_log_prob, optim, training_batch_size=10):
        self.model = model
        self.guide_log_prob = guide_log_prob
        self.optim = optim
        self.training_batch_size = training_batch_size
        self.validation_batch = None
        self._history = []

    def _sample_from_joint(self):
        with torch.no_grad():
            return self.model()

    def set_validation_batch(self, n=20):
        self.validation_batch = [self._sample_from_joint() for _ in range(n)]

    def _differentiable_loss_particle(self, model_trace):
        return -self.guide_log_prob(model_trace)

    def loss_and_grads(self, grads, batch=None):
        if batch is None:
            batch = [self._sample_from_joint() for _ in range(self.training_batch_size)]
        batch_size = len(batch)
        loss = 0.0
        for model_trace in batch:
            with param_capture() as captured:
                particle_loss = self._differentiable_loss_particle(model_trace)
            particle_loss = particle_loss / batch_size
            if grads:
                guide_params = list(captured.values())
                guide_grads = torch.autograd.grad(particle_loss, guide_params, allow_unused=True)
                for guide_grad, guide_param in zip(guide_grads, guide_params):
                    guide_param.grad = guide_grad if guide_param.grad is None else guide_param.grad + guide_grad
            loss += particle_loss.item()
        if math.isnan(loss):
            raise ValueError("loss is NaN")
        return loss

    def step(self):
        self.optim.zero_grad()
        loss = self.loss_and_grads(True)
        self.optim.step()
        self._history.append(loss)
        return loss

    def validation_loss(self):
        if self.validation_batch is None:
            self.set_validation_batch()
        with torch.no_grad():
            return self.loss_and_grads(False, self.validation_batch)

    @torch.no_grad()
    def importance_posterior_mean(self, ys, num_samples):
        q = guide_distribution(ys)
        z = q.sample((num_samples,))
        log_prior = Normal(0.0, 1.0).log_prob(z).sum(-1)
        mean_y = z[:, :1] * XS + z[:, 1:]
        log_lik = Normal(mean_y, 0.1).log_prob(ys).sum(-1)
        log_w = log_prior + log_lik - q.log_prob(z).sum(-1)
        w = torch.softmax(log_w, dim=0)
        return (w[:, None] * z).sum(0)


class OptimWrapper(object):
    """Lazily builds a torch optimizer over whatever the param store holds."""

    def __init__(self, optim_cls, optim_args):
        self.optim_cls = optim_cls
        self.optim_args = optim_args
        self._optim = None
        self._n_params = 0

    def _ensure(self):
        params = _PARAM_STORE.parameters()
        if self._optim is None or len(params) != self._n_params:
            self._optim = self.optim_cls(params, **self.optim_args)
            self._n_params = len(params)
        return self._optim

    def zero_grad(self):
        for p in _PARAM_STORE.parameters():
            p.grad = None

    def step(self):
        self._ensure().step()


def main():
    torch.manual_seed(cfg.seed)
    optim = OptimWrapper(torch.optim.Adam, {"lr": cfg.lr})
    csis = CSIS(model, guide_log_prob, optim, training_batch_size=cfg.batch)
    for i in range(cfg.steps):
        loss = csis.step()
        if i % 5 == 0:
            print("step %d train %.3f val %.3f" % (i, loss, csis.validation_loss()))
    truth = model()
    est = csis.importance_posterior_mean(truth["ys"], cfg.n_importance)
    print("true (%.2f, %.2f) estimated (%.2f, %.2f)" % (truth["slope"], truth["offset"], est[0], est[1]))


if __name__ == "__main__":
    main()
