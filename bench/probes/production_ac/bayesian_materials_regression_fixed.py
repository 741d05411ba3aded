# expect: clean
# source: https://github.com/pyro-ppl/pyro/issues/953
"""Variational Bayesian regression of a materials property from composition descriptors.

Follows the structure of Pyro's bayesian_regression example, implemented with
a tiny in-file param store and a reparameterised Trace_ELBO: a linear model
with Gaussian priors on weight and bias predicts the (standardised) formation
energy of synthetic compounds from elemental-fraction and electronegativity
descriptors.  The guide is a mean-field Normal; Adam optimises all parameters
registered in the store.  Data are kept in float64 as usual for physical
property regression.
"""
import argparse
import math

import torch
import torch.nn.functional as F

softplus = torch.nn.Softplus()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Bayesian regression of formation energies")
    p.add_argument("-n", "--num-epochs", type=int, default=60)
    p.add_argument("--num-compounds", type=int, default=200)
    p.add_argument("--num-descriptors", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--num-particles", type=int, default=4)
    p.add_argument("--precision", choices=["float32", "float64"], default="float64")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class ParamStoreDict:
    """Global name -> unconstrained tensor mapping (leaf tensors optimised directly)."""

    def __init__(self):
        self._params = {}

    def clear(self):
        self._params.clear()

    def get_param(self, name, init_tensor=None):
        if name not in self._params:
            if init_tensor is None:
                raise KeyError(name)
            init_tensor.requires_grad = True
            self._params[name] = init_tensor
        return self._params[name]

    def parameters(self):
        return list(self._params.values())

    def named_parameters(self):
        return list(self._params.items())


PARAM_STORE = ParamStoreDict()


def param(name, init_tensor=None):
    return PARAM_STORE.get_param(name, init_tensor)


def build_dataset(args, dtype):
    """Descriptors: 3 elemental fractions + mean electronegativity + radius mismatch."""
    g = torch.Generator().manual_seed(args.seed)
    frac = torch.distributions.Dirichlet(torch.ones(3)).sample((args.num_compounds,))
    en = 1.5 + frac @ torch.tensor([0.8, 1.6, 2.4]) + 0.05 * torch.randn(args.num_compounds, generator=g)
    mismatch = (frac * torch.tensor([1.2, 1.4, 1.1])).std(dim=1)
    X = torch.cat([frac, en[:, None], mismatch[:, None]], dim=1)[:, : args.num_descriptors]
    true_w = torch.tensor([-1.0, 0.5, 0.8, -2.0, 3.0])[: args.num_descriptors]
    y = X @ true_w + 0.3 + 0.05 * torch.randn(args.num_compounds, generator=g)
    X = (X - X.mean(0)) / X.std(0)
    y = (y - y.mean()) / y.std()
    return X.to(dtype), y.to(dtype)


def normal_log_prob(x, loc, scale):
    return -0.5 * ((x - loc) / scale) ** 2 - torch.log(scale) - 0.5 * math.log(2 * math.pi)


def model_log_joint(data_x, data_y, w, b):
    """log p(y | x, w, b) + log p(w) + log p(b) with unit-normal priors."""
    mu = data_x @ w.squeeze(0) + b
    lp = normal_log_prob(data_y, mu, torch.full_like(mu, 0.1)).sum()
    lp = lp + normal_log_prob(w, torch.zeros_like(w), torch.ones_like(w)).sum()
    lp = lp + normal_log_prob(b, torch.zeros_like(b), torch.ones_like(b)).sum()
    return lp


def guide(data):
    p = data.size(-1)
    w_loc = torch.randn(1, p).type_as(data)
    w_log_sig = (-3.0 * torch.ones(1, p) + 0.05 * torch.randn(1, p)).type_as(data)
    b_loc = (torch.randn(1) * 0.1).type_as(data)
    b_log_sig = (-3.0 * torch.ones(1)).type_as(data)
    mw_param = param("guide_mean_weight", w_loc)
    sw_param = softplus(param("guide_log_scale_weight", w_log_sig))
    mb_param = param("guide_mean_bias", b_loc)
    sb_param = softplus(param("guide_log_scale_bias", b_log_sig))
    return (mw_param, sw_param), (mb_param, sb_param)


class TraceELBO:
    def __init__(self, num_particles):
        self.num_particles = num_particles

    def loss(self, data_x, data_y):
        (mw, sw), (mb, sb) = guide(data_x)
        total = 0.0
        for _ in range(self.num_particles):
            w = mw + sw * torch.randn_like(mw)
            b = mb + sb * torch.randn_like(mb)
            log_q = normal_log_prob(w, mw, sw).sum() + normal_log_prob(b, mb, sb).sum()
            total = total + (log_q - model_log_joint(data_x, data_y, w, b))
        return total / self.num_particles / data_x.shape[0]


class SVI:
    def __init__(self, elbo, lr):
        self.elbo = elbo
        self.lr = lr
        self.optim = None
        self.scheduler = None

    def step(self, data_x, data_y):
        loss = self.elbo.loss(data_x, data_y)
        if self.optim is None:
            self.optim = torch.optim.Adam(PARAM_STORE.parameters(), lr=self.lr)
            self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optim, gamma=0.98)
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        self.scheduler.step()
        return loss.item()


def evaluate(data_x, data_y):
    with torch.no_grad():
        w = param("guide_mean_weight")
        b = param("guide_mean_bias")
        pred = data_x @ w.squeeze(0) + b
        return F.mse_loss(pred, data_y).item(), softplus(param("guide_log_scale_weight")).mean().item()


def main(args):
    torch.manual_seed(args.seed)
    dtype = torch.float64 if args.precision == "float64" else torch.float32
    X, y = build_dataset(args, dtype)
    n_train = int(0.8 * len(y))
    PARAM_STORE.clear()
    svi = SVI(TraceELBO(args.num_particles), args.lr)
    for epoch in range(args.num_epochs):
        loss = svi.step(X[:n_train], y[:n_train])
        if epoch % 20 == 0:
            print("[epoch %04d] loss: %.4f" % (epoch + 1, loss))
    mse, post_scale = evaluate(X[n_train:], y[n_train:])
    print("held-out mse %.4f  mean posterior weight scale %.4f" % (mse, post_scale))
    for name, value in PARAM_STORE.named_parameters():
        print("[%s]" % name, value.detach().view(-1)[:3].tolist())


if __name__ == "__main__":
    main(parse_args([]))
