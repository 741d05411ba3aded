# expect: requires_grad_nonleaf
# source: https://github.com/pyro-ppl/pyro/pull/1150
"""Variational autoencoder trained with stochastic variational inference on
top of a small Pyro-style parameter store (named, constrained parameters).

The VAE uses a learnable Gaussian prior whose location is initialised from
the encoder means of the first batch (data-dependent initialisation).
"""
import weakref
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, constraints, transform_to


class ParamStoreDict(object):
    """
    Global store for parameters. This is basically a key-value store; the
    typical user interacts with it through the `param` primitive.

    - parameters must be assigned unique names
    - the `init_tensor` argument is only used the first time that a given
      (named) parameter is registered.
    """

    def __init__(self):
        self._params = {}  # dictionary from param name to param
        self._param_to_name = {}  # dictionary from unconstrained param to param name
        self._constraints = {}  # dictionary from param name to constraint object

    def clear(self):
        self._params, self._param_to_name, self._constraints = {}, {}, {}

    def named_parameters(self):
        return self._params.items()

    def get_all_param_names(self):
        return self._params.keys()

    def get_param(self, name, init_tensor=None, constraint=constraints.real):
        """
        Get parameter from its name. If it does not yet exist in the
        ParamStore, it will be created and stored.
        """
        if name not in self._params:
            # if not create the init tensor through
            assert init_tensor is not None, \
                "cannot initialize a parameter '{}' with None. Did you get the param name right?".format(name)

            # a function
            if callable(init_tensor):
                init_tensor = init_tensor()

            # store the unconstrained value and constraint
            with torch.no_grad():
                unconstrained_param = transform_to(constraint).inv(init_tensor)
            unconstrained_param.requires_grad = True  # raises
            self._params[name] = unconstrained_param
            self._constraints[name] = constraint

            # keep track of each tensor and it's name
            self._param_to_name[unconstrained_param] = name

        elif init_tensor is not None and not callable(init_tensor):
            if self._params[name].shape != init_tensor.shape:
                raise ValueError("param {} init tensor shape does not match existing value: {} vs {}".format(
                    name, init_tensor.shape, self._params[name].shape))

        # get the guaranteed to exist param
        unconstrained_param = self._params[name]

        # compute the constrained value
        param = transform_to(self._constraints[name])(unconstrained_param)
        param.unconstrained = weakref.ref(unconstrained_param)
        return param

    def param_name(self, p):
        return self._param_to_name.get(p)


_PARAM_STORE = ParamStoreDict()


def param(name, *args, **kwargs):
    return _PARAM_STORE.get_param(name, *args, **kwargs)


def module(name, nn_module):
    """Registers all parameters of a torch.nn.Module with the param store."""
    for param_name, param_value in nn_module.named_parameters():
        param("{}$$${}".format(name, param_name), param_value)
    return nn_module


def clear_param_store():
    _PARAM_STORE.clear()


# ---------------------------------------------------------------- optim
class PyroAdam:
    """Per-parameter Adam optimizers created lazily for every parameter
    that shows up in a step (mirrors the wrapper around torch optimizers)."""

    def __init__(self, optim_args):
        self.optim_args = optim_args
        self.optim_objs = {}

    def __call__(self, params):
        for p in params:
            if p.grad is None:
                continue
            if p not in self.optim_objs:
                self.optim_objs[p] = torch.optim.Adam([p], **self.optim_args)
            self.optim_objs[p].step()


# ---------------------------------------------------------------- model
class Encoder(nn.Module):
    def __init__(self, z_dim, hidden_dim, x_dim=64):
        super().__init__()
        self.fc1 = nn.Linear(x_dim, hidden_dim)
        self.fc21 = nn.Linear(hidden_dim, z_dim)
        self.fc22 = nn.Linear(hidden_dim, z_dim)

    def forward(self, x):
        hidden = F.softplus(self.fc1(x))
        return self.fc21(hidden), torch.exp(self.fc22(hidden))


class Decoder(nn.Module):
    def __init__(self, z_dim, hidden_dim, x_dim=64):
        super().__init__()
        self.fc1 = nn.Linear(z_dim, hidden_dim)
        self.fc21 = nn.Linear(hidden_dim, x_dim)

    def forward(self, z):
        return torch.sigmoid(self.fc21(F.softplus(self.fc1(z))))


class VAE(nn.Module):
    def __init__(self, z_dim=4, hidden_dim=32):
        super().__init__()
        self.encoder = Encoder(z_dim, hidden_dim)
        self.decoder = Decoder(z_dim, hidden_dim)
        self.z_dim = z_dim

    def guide(self, x):
        """q(z|x): returns a reparameterised sample and its log-density."""
        module("encoder", self.encoder)
        z_loc, z_scale = self.encoder(x)
        q = Normal(z_loc, z_scale)
        z = q.rsample()
        return z, q.log_prob(z).sum(-1), z_loc

    def model(self, x, z, z_loc):
        """p(x, z) with a learnable prior p(z) = N(prior_loc, prior_scale)."""
        module("decoder", self.decoder)
        prior_loc = param("prior_loc", lambda: z_loc.mean(0))
        prior_scale = param("prior_scale", torch.ones(self.z_dim), constraint=constraints.positive)
        log_pz = Normal(prior_loc, prior_scale).log_prob(z).sum(-1)
        probs = self.decoder(z).clamp(1e-6, 1 - 1e-6)
        log_px = (x * torch.log(probs) + (1 - x) * torch.log(1 - probs)).sum(-1)
        return log_px + log_pz


class Trace_ELBO:
    def __init__(self, num_particles=1):
        self.num_particles = num_particles

    def differentiable_loss(self, model, guide, x):
        elbo = 0.0
        for _ in range(self.num_particles):
            z, log_q, z_loc = guide(x)
            elbo = elbo + (model(x, z, z_loc) - log_q).sum() / self.num_particles
        return -elbo


class SVI:
    def __init__(self, model, guide, optim, loss):
        self.model, self.guide, self.optim, self.loss = model, guide, optim, loss

    def step(self, x):
        loss = self.loss.differentiable_loss(self.model, self.guide, x)
        loss.backward()
        params = [p for _, p in _PARAM_STORE.named_parameters()]
        self.optim(params)
        for p in params:
            p.grad = None
        return loss.item()


def make_binary_images(n=256, seed=0):
    """Bars dataset: 8x8 binary images with one random horizontal and one vertical bar."""
    g = torch.Generator().manual_seed(seed)
    imgs = torch.zeros(n, 8, 8)
    rows = torch.randint(0, 8, (n,), generator=g)
    cols = torch.randint(0, 8, (n,), generator=g)
    imgs[torch.arange(n), rows, :] = 1.0
    imgs[torch.arange(n), :, cols] = 1.0
    flip = torch.rand(n, 8, 8, generator=g) < 0.03
    return torch.where(flip, 1 - imgs, imgs).view(n, 64)


def main(args):
    torch.manual_seed(args.seed)
    clear_param_store()
    data = make_binary_images(seed=args.seed)
    vae = VAE(z_dim=args.z_dim, hidden_dim=args.hidden_dim)
    svi = SVI(vae.model, vae.guide, PyroAdam({"lr": args.learning_rate}), loss=Trace_ELBO())
    for epoch in range(args.num_epochs):
        epoch_loss = 0.0
        for i in range(0, len(data), args.batch_size):
            epoch_loss += svi.step(data[i:i + args.batch_size])
        print("[epoch %03d]  average training loss: %.4f" % (epoch, epoch_loss / len(data)))
    return epoch_loss / len(data)


if __name__ == "__main__":
    main(SimpleNamespace(num_epochs=5, learning_rate=1e-2, batch_size=32, z_dim=4, hidden_dim=32, seed=0))
