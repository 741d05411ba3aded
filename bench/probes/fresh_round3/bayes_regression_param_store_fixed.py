# expect: clean
# source: https://github.com/pyro-ppl/pyro/pull/970
"""Bayesian linear regression with a minimal trace-based SVI engine and a global param store."""
import numpy as np
import torch
from torch.distributions import Normal
from torch.nn.functional import softplus


class ParamStoreDict:
    """Global key-value store of learnable tensors."""

    def __init__(self):
        self._params = {}

    def clear(self):
        self._params = {}

    def named_parameters(self):
        return self._params.items()

    def get_param(self, name, init_tensor=None):
        if name not in self._params:
            assert init_tensor is not None, "cannot initialize a parameter '{}' with None".format(name)
            param = init_tensor
            param.requires_grad = True
            self._params[name] = param
        return self._params[name]


_PARAM_STORE = ParamStoreDict()
_TRACE_STACK = []


def param(name, init_tensor=None):
    return _PARAM_STORE.get_param(name, init_tensor)


def clear_param_store():
    _PARAM_STORE.clear()


class Trace:
    def __init__(self, replay_values=None):
        self.nodes = {}
        self.replay_values = replay_values or {}

    def __enter__(self):
        _TRACE_STACK.append(self)
        return self

    def __exit__(self, *exc):
        _TRACE_STACK.pop()

    def log_prob_sum(self):
        return sum(site["fn"].log_prob(site["value"]).sum() for site in self.nodes.values())


def sample(name, fn, obs=None):
    trace = _TRACE_STACK[-1] if _TRACE_STACK else None
    if obs is not None:
        value = obs
    elif trace is not None and name in trace.replay_values:
        value = trace.replay_values[name]
    else:
        value = fn.rsample()
    if trace is not None:
        trace.nodes[name] = {"fn": fn, "value": value, "is_observed": obs is not None}
    return value


class Trace_ELBO:
    def __init__(self, num_particles=1):
        self.num_particles = num_particles

    def loss_and_grads(self, model, guide, *args):
        loss = 0.0
        for _ in range(self.num_particles):
            with Trace() as guide_trace:
                guide(*args)
            replay = {k: v["value"] for k, v in guide_trace.nodes.items()}
            with Trace(replay_values=replay) as model_trace:
                model(*args)
            elbo = model_trace.log_prob_sum() - guide_trace.log_prob_sum()
            surrogate = -elbo / self.num_particles
            surrogate.backward()
            loss += surrogate.item()
        return loss


class PyroAdam:
    """Lazily creates one torch optimizer per parameter in the store."""

    def __init__(self, optim_args):
        self.optim_args = optim_args
        self.optim_objs = {}

    def step(self, named_params):
        for name, p in named_params:
            if name not in self.optim_objs:
                self.optim_objs[name] = torch.optim.Adam([p], **self.optim_args)
            self.optim_objs[name].step()
            self.optim_objs[name].zero_grad()


class SVI:
    def __init__(self, model, guide, optim, loss):
        self.model, self.guide, self.optim, self.loss = model, guide, optim, loss

    def step(self, *args):
        loss = self.loss.loss_and_grads(self.model, self.guide, *args)
        self.optim.step(list(_PARAM_STORE.named_parameters()))
        return loss


N = 100
p = 2


def build_linear_dataset(N, p, noise_std=0.01):
    X = np.random.rand(N, p)
    w = np.random.randint(4, size=p)
    print("w = {}".format(w))
    y = np.matmul(X, w) + np.repeat(1, N) + np.random.normal(0, noise_std, size=N)
    y = y.reshape(N, 1)
    return torch.tensor(np.concatenate((X, y), axis=1))


def model(data):
    loc = torch.zeros(1, p).type_as(data)
    scale = 2 * torch.ones(1, p).type_as(data)
    bias_loc = torch.zeros(1).type_as(data)
    bias_scale = 2 * torch.ones(1).type_as(data)
    w = sample("linear.weight", Normal(loc, scale))
    b = sample("linear.bias", Normal(bias_loc, bias_scale))
    x_data = data[:, :-1]
    y_data = data[:, -1]
    prediction_mean = (x_data @ w.t()).squeeze(-1) + b
    sample("obs", Normal(prediction_mean, 1), obs=y_data)


def guide(data):
    w_loc = torch.randn(1, p).type_as(data)
    w_loc.requires_grad = True
    w_log_sig = (-3.0 * torch.ones(1, p) + 0.05 * torch.randn(1, p)).type_as(data).requires_grad_()
    b_loc = torch.randn(1).type_as(data)
    b_loc.requires_grad = True
    b_log_sig = (-3.0 * torch.ones(1) + 0.05 * torch.randn(1)).type_as(data).requires_grad_()
    mw_param = param("guide_mean_weight", w_loc)
    sw_param = softplus(param("guide_log_scale_weight", w_log_sig))
    mb_param = param("guide_mean_bias", b_loc)
    sb_param = softplus(param("guide_log_scale_bias", b_log_sig))
    sample("linear.weight", Normal(mw_param, sw_param))
    sample("linear.bias", Normal(mb_param, sb_param))


def main(num_epochs=150, batch_size=20):
    np.random.seed(0)
    torch.manual_seed(0)
    data = build_linear_dataset(N, p)
    clear_param_store()
    svi = SVI(model, guide, PyroAdam({"lr": 0.05}), loss=Trace_ELBO())
    for epoch in range(num_epochs):
        epoch_loss = 0.0
        perm = torch.randperm(N)
        for i in range(0, N, batch_size):
            epoch_loss += svi.step(data[perm[i:i + batch_size]])
        if epoch % 50 == 0:
            print("[epoch %04d] loss: %.4f" % (epoch + 1, epoch_loss / float(N)))
    for name, value in _PARAM_STORE.named_parameters():
        print("[%s]: %s" % (name, value.detach().numpy().round(3)))


if __name__ == "__main__":
    main()
