# expect: clean
# source: https://forum.pyro.ai/t/try-to-understand-param-with-constraints/4761
import torch
from torch.distributions import Normal, constraints, transform_to
from torch.optim import Adam

torch.manual_seed(0)

# minimal pyro-style parameter store
_PARAM_STORE = {}


def param(name, init_tensor=None, constraint=constraints.real):
    if name not in _PARAM_STORE:
        unconstrained = transform_to(constraint).inv(init_tensor).detach().requires_grad_()
        _PARAM_STORE[name] = (unconstrained, constraint)
    unconstrained, constraint = _PARAM_STORE[name]
    return transform_to(constraint)(unconstrained)


def unconstrained_param(name):
    return _PARAM_STORE[name][0]


def model(x):
    mu = param("mu", torch.tensor(1.0), constraint=constraints.greater_than(0.0))
    return Normal(mu, 1.0).log_prob(x).sum()


data = 5.0 + torch.randn(100)

model(data)  # instantiate the mu parameter
optimizer = Adam([unconstrained_param("mu")], lr=0.01)

mus, losses = [], []
for step in range(300):
    # optimizer wants to push positive values towards zero,
    # so use the negative log probability
    loss = -model(data)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    mus.append(param("mu").item())

print("final mu: %.3f  final loss: %.3f" % (mus[-1], losses[-1]))
