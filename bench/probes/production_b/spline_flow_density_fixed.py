# expect: clean
# source: https://github.com/bayesiains/nflows/issues/89
"""Neural spline flow (rational-quadratic coupling) for density estimation.

Coupling layers follow the nflows layout: a conditioner network maps the
identity half to spline parameters that are split into widths, heights and
knot derivatives for the transformed half.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = SimpleNamespace(
    features=4,
    num_layers=3,
    num_bins=6,
    tail_bound=3.0,
    conditioner=SimpleNamespace(hidden_features=32, num_blocks=2, dropout=0.0, out_activation="relu"),
    train=SimpleNamespace(batch_size=64, iters=8, lr=5e-4, clip=5.0, log_every=2),
)

MIN_BIN_WIDTH = 1e-3
MIN_BIN_HEIGHT = 1e-3
MIN_DERIVATIVE = 1e-3

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "identity": nn.Identity, "elu": nn.ELU}


class DenseBlock(nn.Module):
    def __init__(self, features, dropout):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(features), nn.ELU(), nn.Linear(features, features),
                                 nn.Dropout(dropout), nn.ELU(), nn.Linear(features, features))

    def forward(self, x):
        return x + self.net(x)


class Conditioner(nn.Module):
    def __init__(self, in_features, out_features, ccfg):
        super().__init__()
        self.hidden_features = ccfg.hidden_features
        self.inp = nn.Linear(in_features, ccfg.hidden_features)
        self.blocks = nn.ModuleList(DenseBlock(ccfg.hidden_features, ccfg.dropout)
                                    for _ in range(ccfg.num_blocks))
        self.out = nn.Linear(ccfg.hidden_features, out_features)
        self.out_act = ACTIVATIONS[ccfg.out_activation]()
        nn.init.uniform_(self.out.weight, -1e-3, 1e-3)
        nn.init.uniform_(self.out.bias, 0.0, 1e-3)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out_act(self.out(h))


def _searchsorted(bin_locations, inputs):
    return torch.searchsorted(bin_locations.contiguous(), inputs.unsqueeze(-1).contiguous()).squeeze(-1)


def rational_quadratic_spline(inputs, unnormalized_widths, unnormalized_heights, unnormalized_derivatives,
                              tail_bound):
    num_bins = unnormalized_widths.shape[-1]
    inside = (inputs >= -tail_bound) & (inputs <= tail_bound)
    x = inputs.clamp(-tail_bound, tail_bound)

    widths = F.softmax(unnormalized_widths, dim=-1)
    widths = MIN_BIN_WIDTH + (1 - MIN_BIN_WIDTH * num_bins) * widths
    cumwidths = F.pad(torch.cumsum(widths, dim=-1), (1, 0))
    cumwidths = 2 * tail_bound * cumwidths - tail_bound
    widths = cumwidths[..., 1:] - cumwidths[..., :-1]

    const = math.log(math.exp(1 - MIN_DERIVATIVE) - 1)
    derivatives = F.pad(unnormalized_derivatives, (1, 1), value=const)
    derivatives = MIN_DERIVATIVE + F.softplus(derivatives)

    heights = F.softmax(unnormalized_heights, dim=-1)
    heights = MIN_BIN_HEIGHT + (1 - MIN_BIN_HEIGHT * num_bins) * heights
    cumheights = F.pad(torch.cumsum(heights, dim=-1), (1, 0))
    cumheights = 2 * tail_bound * cumheights - tail_bound
    heights = cumheights[..., 1:] - cumheights[..., :-1]

    idx = _searchsorted(cumwidths[..., 1:-1], x)[..., None]
    in_cw = cumwidths.gather(-1, idx)[..., 0]
    in_bw = widths.gather(-1, idx)[..., 0]
    in_ch = cumheights.gather(-1, idx)[..., 0]
    delta = heights / widths
    in_delta = delta.gather(-1, idx)[..., 0]
    in_d = derivatives[..., :-1].gather(-1, idx)[..., 0]
    in_d1 = derivatives[..., 1:].gather(-1, idx)[..., 0]
    in_h = heights.gather(-1, idx)[..., 0]

    theta = (x - in_cw) / in_bw
    t1mt = theta * (1 - theta)
    numerator = in_h * (in_delta * theta.pow(2) + in_d * t1mt)
    denominator = in_delta + (in_d + in_d1 - 2 * in_delta) * t1mt
    outputs = in_ch + numerator / denominator
    deriv_num = in_delta.pow(2) * (in_d1 * theta.pow(2) + 2 * in_delta * t1mt + in_d * (1 - theta).pow(2))
    logabsdet = torch.log(deriv_num) - 2 * torch.log(denominator)

    outputs = torch.where(inside, outputs, inputs)
    logabsdet = torch.where(inside, logabsdet, torch.zeros_like(logabsdet))
    return outputs, logabsdet


class RQSCoupling(nn.Module):
    def __init__(self, mask, ccfg, num_bins, tail_bound):
        super().__init__()
        self.register_buffer("identity_idx", torch.nonzero(mask <= 0).flatten())
        self.register_buffer("transform_idx", torch.nonzero(mask > 0).flatten())
        self.num_bins = num_bins
        self.tail_bound = tail_bound
        n_id, n_tr = len(self.identity_idx), len(self.transform_idx)
        self.transform_net = Conditioner(n_id, n_tr * self._params_per_dim(), ccfg)

    def _params_per_dim(self):
        return 3 * self.num_bins - 1

    def _elementwise_forward(self, inputs, transform_params):
        b, d = inputs.shape
        transform_params = transform_params.view(b, d, self._params_per_dim())
        unnormalized_widths = transform_params[..., : self.num_bins]
        unnormalized_heights = transform_params[..., self.num_bins: 2 * self.num_bins]
        unnormalized_derivatives = transform_params[..., 2 * self.num_bins:]
        unnormalized_widths = unnormalized_widths / np.sqrt(self.transform_net.hidden_features)
        unnormalized_heights = unnormalized_heights / np.sqrt(self.transform_net.hidden_features)
        outputs, logabsdet = rational_quadratic_spline(inputs, unnormalized_widths, unnormalized_heights,
                                                       unnormalized_derivatives, self.tail_bound)
        return outputs, logabsdet.sum(-1)

    def forward(self, x):
        identity = x[:, self.identity_idx]
        params = self.transform_net(identity)
        transformed, logabsdet = self._elementwise_forward(x[:, self.transform_idx], params)
        out = torch.empty_like(x)
        out[:, self.identity_idx] = identity
        out[:, self.transform_idx] = transformed
        return out, logabsdet


class ReversePermutation(nn.Module):
    def forward(self, x):
        return x.flip(-1), x.new_zeros(x.shape[0])


class NeuralSplineFlow(nn.Module):
    def __init__(self, c):
        super().__init__()
        layers = []
        for i in range(c.num_layers):
            mask = torch.arange(c.features) % 2 == (i % 2)
            layers.append(RQSCoupling(mask.float(), c.conditioner, c.num_bins, c.tail_bound))
            layers.append(ReversePermutation())
        self.layers = nn.ModuleList(layers)
        self.features = c.features

    def log_prob(self, x):
        total = x.new_zeros(x.shape[0])
        for layer in self.layers:
            x, lad = layer(x)
            total = total + lad
        base = -0.5 * (x.pow(2).sum(-1) + self.features * math.log(2 * math.pi))
        return base + total


def sample_data(n, features, rng):
    angle = rng.uniform(0, np.pi, size=n)
    moons = np.stack([np.cos(angle), np.sin(angle)], 1)
    flip = rng.rand(n) < 0.5
    moons[flip] = 1.0 - moons[flip] - np.array([0.0, 0.5])
    extra = rng.randn(n, features - 2) * 0.3 + moons[:, :1] * 0.5
    data = np.concatenate([moons, extra], 1) + 0.05 * rng.randn(n, features)
    return torch.tensor(data, dtype=torch.float32)


def train(flow, c):
    rng = np.random.RandomState(0)
    opt = torch.optim.Adam(flow.parameters(), lr=c.train.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=c.train.iters)
    for it in range(c.train.iters):
        batch = sample_data(c.train.batch_size, c.features, rng)
        loss = -flow.log_prob(batch).mean()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(flow.parameters(), c.train.clip)
        opt.step()
        sched.step()
        if it % c.train.log_every == 0:
            print(f"iter {it:03d}  nll {loss.item():.4f}  lr {sched.get_last_lr()[0]:.2e}")
    with torch.no_grad():
        held = sample_data(256, c.features, rng)
        print(f"held-out nll {-flow.log_prob(held).mean().item():.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    model = NeuralSplineFlow(cfg)
    print(f"flow with {sum(p.numel() for p in model.parameters())} params")
    train(model, cfg)
