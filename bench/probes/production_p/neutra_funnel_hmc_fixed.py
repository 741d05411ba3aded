# expect: clean
# source: https://github.com/pyro-ppl/pyro/pull/2282
"""NeuTra HMC on Neal's funnel (Pyro-style components, condensed).

An inverse autoregressive flow guide (AutoIAFNormal) is fit with SVI; HMC then
runs in the flow's base space, where the warped posterior is close to an
isotropic Gaussian. The flow is a cached torch Transform (cache_size=1), as in
pyro.distributions.transforms.AffineAutoregressive.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import grad
from torch.distributions import Normal, constraints
from torch.distributions.transforms import Transform

torch.manual_seed(0)
np.random.seed(0)
DIM = 4  # 1 scale variable + 3 funnel coordinates


# ---------------------------------------------------------------- flows
class MaskedLinear(nn.Linear):
    def __init__(self, in_features, out_features, mask, bias=True):
        super().__init__(in_features, out_features, bias)
        self.register_buffer("mask", mask.data)

    def forward(self, _input):
        return F.linear(_input, self.mask * self.weight, self.bias)


class AutoRegressiveNN(nn.Module):
    def __init__(self, input_dim, hidden_dims, param_dims=(1, 1)):
        super().__init__()
        self.input_dim, self.param_dims = input_dim, list(param_dims)
        perm = torch.arange(input_dim)
        degrees = [perm]
        for h in hidden_dims:
            degrees.append(torch.arange(h) % max(1, input_dim - 1))
        layers, prev = [], input_dim
        for d_in, d_out, h in zip(degrees[:-1], degrees[1:], hidden_dims):
            layers.append(MaskedLinear(prev, h, (d_out[:, None] >= d_in[None, :]).float()))
            prev = h
        self.layers = nn.ModuleList(layers)
        out_deg = perm.repeat(sum(param_dims))
        self.out = MaskedLinear(prev, input_dim * sum(param_dims), (out_deg[:, None] > degrees[-1][None, :]).float())

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = F.relu(layer(h))
        h = self.out(h).reshape(x.shape[:-1] + (sum(self.param_dims), self.input_dim))
        return tuple(h.unbind(-2))


class AffineAutoregressive(Transform, nn.Module):
    domain = constraints.real_vector
    codomain = constraints.real_vector
    bijective = True
    sign = +1

    def __init__(self, autoregressive_nn, log_scale_min_clip=-5., log_scale_max_clip=3.):
        Transform.__init__(self, cache_size=1)
        nn.Module.__init__(self)
        self.arn = autoregressive_nn
        self._cached_log_scale = None
        self.log_scale_min_clip = log_scale_min_clip
        self.log_scale_max_clip = log_scale_max_clip

    def __hash__(self):
        return nn.Module.__hash__(self)

    def _call(self, x):
        mean, log_scale = self.arn(x)
        log_scale = log_scale.clamp(self.log_scale_min_clip, self.log_scale_max_clip)
        self._cached_log_scale = log_scale
        return torch.exp(log_scale) * x + mean

    def log_abs_det_jacobian(self, x, y):
        x_old, y_old = self._cached_x_y
        if x is not x_old or y is not y_old:
            self(x)
        return self._cached_log_scale.sum(-1)


class AutoIAFNormal(nn.Module):
    def __init__(self, latent_dim, hidden_dim=16, num_transforms=2):
        super().__init__()
        self.latent_dim = latent_dim
        self.transforms = nn.ModuleList([
            AffineAutoregressive(AutoRegressiveNN(latent_dim, [hidden_dim])) for _ in range(num_transforms)])

    def get_base_dist(self):
        return Normal(torch.zeros(self.latent_dim), torch.ones(self.latent_dim))

    def transform(self, u):
        """Push u through the flow; returns (x, sum log|det J|)."""
        x, log_det = u, 0.
        for t in self.transforms:
            y = t(x)
            log_det = log_det + t.log_abs_det_jacobian(x, y)
            x = torch.flip(y, [-1])
        return x, log_det


def funnel_log_prob(x):
    v, rest = x[..., 0], x[..., 1:]
    lp = Normal(0., 3.).log_prob(v)
    return lp + Normal(0., torch.exp(v / 2).unsqueeze(-1)).log_prob(rest).sum(-1)


# ---------------------------------------------------------------- SVI
def fit_guide(guide, num_steps=150, num_particles=16, lr=1e-2):
    optim = torch.optim.Adam(guide.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(optim, gamma=0.995)
    base = guide.get_base_dist()
    for step in range(num_steps):
        u = base.rsample((num_particles,))
        x, log_det = guide.transform(u)
        elbo = (funnel_log_prob(x) + log_det - base.log_prob(u).sum(-1)).mean()
        optim.zero_grad()
        (-elbo).backward()
        optim.step()
        sched.step()
        if step % 50 == 0:
            print(f"svi step {step:4d} elbo {elbo.item():.3f}")
    return guide


# ---------------------------------------------------------------- HMC
def potential_grad(potential_fn, z):
    z_keys, z_nodes = zip(*z.items())
    for node in z_nodes:
        node.requires_grad_(True)
    potential_energy = potential_fn(z)
    grads = grad(potential_energy, z_nodes)
    for node in z_nodes:
        node.requires_grad_(False)
    return dict(zip(z_keys, grads)), potential_energy.detach()


def _kinetic_grad(inverse_mass_matrix, r):
    return {k: inverse_mass_matrix * v for k, v in r.items()}


def velocity_verlet(z, r, potential_fn, inverse_mass_matrix, step_size, num_steps=1, z_grads=None):
    z_next, r_next = z.copy(), r.copy()
    for _ in range(num_steps):
        z_grads = potential_grad(potential_fn, z_next)[0] if z_grads is None else z_grads
        for k in r_next:
            r_next[k] = r_next[k] + 0.5 * step_size * (-z_grads[k])
        r_grads = _kinetic_grad(inverse_mass_matrix, r_next)
        for k in z_next:
            z_next[k] = z_next[k] + step_size * r_grads[k]
        z_grads, potential_energy = potential_grad(potential_fn, z_next)
        for k in r_next:
            r_next[k] = r_next[k] + 0.5 * step_size * (-z_grads[k])
    return z_next, r_next, z_grads, potential_energy


class NeuTraHMC:
    def __init__(self, guide, step_size=0.5, trajectory_length=2.0, target_accept_prob=0.8):
        self.guide = guide
        self.step_size = step_size
        self.trajectory_length = trajectory_length
        self._direction_threshold = math.log(target_accept_prob)
        self.inverse_mass_matrix = torch.ones(guide.latent_dim)
        self._z_last = self._potential_energy_last = self._z_grads_last = None
        self._accept_cnt, self._t = 0, 0

    def potential_fn(self, z):
        x, log_det = self.guide.transform(z["u"])
        return -(funnel_log_prob(x) + log_det)

    def _find_valid_initial_params(self, max_tries=100):
        base = self.guide.get_base_dist()
        for _ in range(max_tries):
            params = {"u": base.sample()}
            pe_grad, pe = potential_grad(self.potential_fn, params)
            if torch.isfinite(pe) and all(torch.isfinite(g).all() for g in pe_grad.values()):
                return params
        raise ValueError("Model specification seems incorrect - cannot find valid initial params.")

    def _kinetic_energy(self, r):
        return 0.5 * (self.inverse_mass_matrix * r["u"] ** 2).sum()

    def _sample_r(self):
        return {"u": torch.randn(self.guide.latent_dim) / self.inverse_mass_matrix.sqrt()}

    def _find_reasonable_step_size(self, z):
        step_size = self.step_size
        potential_energy = self.potential_fn(z)
        r = self._sample_r()
        energy_current = self._kinetic_energy(r) + potential_energy
        # This is required so as to avoid issues with autograd when model
        # contains transforms with cache_size > 0 (https://github.com/pyro-ppl/pyro/issues/2292)
        z = {k: v.clone() for k, v in z.items()}
        z_new, r_new, z_grads_new, potential_energy_new = velocity_verlet(
            z, r, self.potential_fn, self.inverse_mass_matrix, step_size)
        delta_energy = self._kinetic_energy(r_new) + potential_energy_new - energy_current
        direction = 1 if self._direction_threshold < -delta_energy else -1
        step_size_scale = 2 ** direction
        direction_new = direction
        while direction_new == direction and 1e-4 < step_size < 1e2:
            step_size = step_size_scale * step_size
            r = self._sample_r()
            energy_current = self._kinetic_energy(r) + potential_energy
            z_new, r_new, z_grads_new, potential_energy_new = velocity_verlet(
                z, r, self.potential_fn, self.inverse_mass_matrix, step_size)
            delta_energy = self._kinetic_energy(r_new) + potential_energy_new - energy_current
            direction_new = 1 if self._direction_threshold < -delta_energy else -1
        return step_size

    def setup(self):
        self.initial_params = self._find_valid_initial_params()
        potential_energy = self.potential_fn(self.initial_params)
        self._z_last, self._potential_energy_last, self._z_grads_last = self.initial_params, potential_energy, None
        self.step_size = self._find_reasonable_step_size(self.initial_params)

    def sample(self):
        z, potential_energy, z_grads = self._z_last, self._potential_energy_last, self._z_grads_last
        r = self._sample_r()
        energy_current = self._kinetic_energy(r) + potential_energy
        num_steps = max(1, int(self.trajectory_length / self.step_size))
        z_new, r_new, z_grads_new, pe_new = velocity_verlet(
            z, r, self.potential_fn, self.inverse_mass_matrix, self.step_size, num_steps, z_grads=z_grads)
        delta_energy = self._kinetic_energy(r_new) + pe_new - energy_current
        accept_prob = (-delta_energy).exp().clamp(max=1.)
        if torch.rand(()) < accept_prob:
            self._z_last, self._potential_energy_last, self._z_grads_last = z_new, pe_new, z_grads_new
            self._accept_cnt += 1
        self._t += 1
        return self._z_last


def run_mcmc(kernel, num_samples=60):
    kernel.setup()
    print(f"step size after search: {kernel.step_size:.4f}")
    samples = []
    for _ in range(num_samples):
        z = kernel.sample()
        with torch.no_grad():
            x, _ = kernel.guide.transform(z["u"].clone())
        samples.append(x)
    samples = torch.stack(samples)
    print(f"accept rate {kernel._accept_cnt / kernel._t:.2f}; "
          f"posterior mean v {samples[:, 0].mean():.3f} std v {samples[:, 0].std():.3f}")
    return samples


def main():
    guide = fit_guide(AutoIAFNormal(DIM))
    guide.requires_grad_(False)
    run_mcmc(NeuTraHMC(guide))


main()
