# expect: clean
# source: https://github.com/HorizonRobotics/alf/pull/1553
"""ALF-style value network with per-layer gradient summaries, trained by TD regression."""
import contextlib
import functools
from collections import defaultdict

import torch
import torch.nn as nn

torch.manual_seed(0)


# ----------------------------------------------------------------------------- alf/summary
class _SummaryState:
    scope = []
    record = lambda: False
    step = 0
    scalars = defaultdict(list)


def scope_name():
    return "/".join(_SummaryState.scope)


@contextlib.contextmanager
def scope(name):
    _SummaryState.scope.append(name)
    try:
        yield
    finally:
        _SummaryState.scope.pop()


@contextlib.contextmanager
def record_if(cond):
    old = _SummaryState.record
    _SummaryState.record = cond
    try:
        yield
    finally:
        _SummaryState.record = old


def should_record_summaries():
    return _SummaryState.record()


def scalar(name, value):
    if should_record_summaries():
        _SummaryState.scalars[name].append((_SummaryState.step, float(value)))


def is_nested(x):
    return isinstance(x, (list, tuple, dict))


# ----------------------------------------------------------------------------- alf/utils/summary_utils.py
def summarize_tensor_gradients(name, tensor, batch_dims=1, clone=False):
    """Summarize the gradient of ``tensor`` during backward.

    Args:
        name (str): name of the summary
        tensor (Tensor): tensor of which the gradient is to be summarized.
        batch_dims (int): first so many dimensions are treated as batch dimensions
        clone (bool): If True, ``tensor`` will first be cloned. This is useful
            if ``tensor`` is used in multiple places and you only want to summarize
            the gradient from one place.
    Returns:
        ``tensor`` or cloned ``tensor``: the cloned ``tensor`` should be used for
            the downstream calculations.
    """

    def _hook(grad, name):
        norm = grad.reshape(*grad.shape[0:batch_dims], -1).norm(dim=-1)
        scalar(name + '/max_norm', norm.max())
        scalar(name + '/avg_norm', norm.mean())

    def _register_hook1(tensor, name):
        if tensor.requires_grad:
            if clone:
                tensor = tensor.clone()
            tensor.register_hook(functools.partial(_hook, name=name))
        return tensor

    name = '/' + scope_name() + name
    assert not is_nested(tensor)
    return _register_hook1(tensor, name)


# ----------------------------------------------------------------------------- alf/layers.py
class ElementwiseLayerBase(nn.Module):
    """Base class for the layers of parameterless elementwise operations."""

    def make_parallel(self, n: int):
        assert len(list(self.parameters())) == 0
        return self


class Identity(ElementwiseLayerBase):
    def forward(self, x):
        return x


class FC(nn.Module):
    def __init__(self, input_size, output_size, activation=torch.relu_, use_bias=True):
        super().__init__()
        self._activation = activation
        self._linear = nn.Linear(input_size, output_size, bias=use_bias)
        nn.init.kaiming_uniform_(self._linear.weight, nonlinearity='relu')

    def forward(self, inputs):
        return self._activation(self._linear(inputs))


class SummarizeGradient(ElementwiseLayerBase):
    def __init__(self, name):
        """A layer for summarizing the gradient of the input tensor.

        Summarize the gradient of the input tensor. Note that if the input tensor
        does not requires gradient (i.e. x.requires_grad is False), gradient
        will not be summarized.

        Args:
            name (str): used to describe the name of the summary, after the
                tag 'tensor_gradient'.
        Returns:
            cloned ``tensor``: with ``requires_grad`` set to True and gradient
            summarization hook registered.
        """
        super().__init__()
        self._name = f"tensor_gradient/{name}"

    def forward(self, x):
        return summarize_tensor_gradients(self._name, x, clone=True)


# ----------------------------------------------------------------------------- alf/networks
class EncodingNetwork(nn.Module):
    def __init__(self, input_size, fc_layer_params=(32, 32), last_layer_size=None,
                 summarize_gradients=False, name="EncodingNetwork"):
        super().__init__()
        self._name = name
        layers = []
        for i, size in enumerate(fc_layer_params):
            layers.append(FC(input_size, size))
            if summarize_gradients:
                layers.append(SummarizeGradient(f"{name}/fc{i}"))
            input_size = size
        if last_layer_size is not None:
            layers.append(FC(input_size, last_layer_size, activation=lambda x: x))
        self._layers = nn.ModuleList(layers)

    def forward(self, inputs, state=()):
        z = inputs
        for layer in self._layers:
            z = layer(z)
        return z, state


# ----------------------------------------------------------------------------- algorithm / trainer
class TDValueAlgorithm(nn.Module):
    """Learns V(s) by one-step TD on a fixed replay of transitions."""

    def __init__(self, obs_dim, gamma=0.9, summarize_grads=True):
        super().__init__()
        self._value_net = EncodingNetwork(obs_dim, (32, 32), last_layer_size=1,
                                          summarize_gradients=summarize_grads, name="value")
        self._target_net = EncodingNetwork(obs_dim, (32, 32), last_layer_size=1, name="target")
        fcs = lambda net: [m for m in net.modules() if isinstance(m, FC)]
        for tgt, src in zip(fcs(self._target_net), fcs(self._value_net)):
            tgt.load_state_dict(src.state_dict())
        self._gamma = gamma
        self._opt = torch.optim.Adam(self._value_net.parameters(), lr=1e-3)

    def train_step(self, exp):
        with scope("value"):
            value, _ = self._value_net(exp["obs"])
        with torch.no_grad():
            next_value, _ = self._target_net(exp["next_obs"])
            target = exp["reward"][:, None] + self._gamma * (1 - exp["done"][:, None]) * next_value
        return ((value - target) ** 2).mean()

    def update_with_gradient(self, loss):
        self._opt.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self._value_net.parameters(), 10.0)
        scalar("value/grad_norm", norm)
        self._opt.step()


def make_replay(n=256, obs_dim=6):
    obs = torch.randn(n, obs_dim)
    return {"obs": obs, "next_obs": obs + 0.1 * torch.randn(n, obs_dim),
            "reward": obs[:, 0].sign(), "done": (torch.rand(n) < 0.05).float()}


def train(num_iterations=5, summary_interval=2):
    algo = TDValueAlgorithm(obs_dim=6)
    replay = make_replay()
    for it in range(num_iterations):
        _SummaryState.step = it
        idx = torch.randint(0, 256, (32,))
        batch = {k: v[idx] for k, v in replay.items()}
        with record_if(lambda: it % summary_interval == 0):
            loss = algo.train_step(batch)
            algo.update_with_gradient(loss)
        print(f"iter {it}: td loss {loss.item():.4f}")
    return dict(_SummaryState.scalars)


summaries = train()
print(sorted(summaries))
