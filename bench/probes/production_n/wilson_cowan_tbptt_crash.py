# expect: freed_graph
# source: https://github.com/NeuroTorch/NeuroTorch/issues/134
"""Truncated BPTT training of a two-layer Wilson-Cowan RNN (NeuroTorch-style, condensed).

The TBPTT learning algorithm is a trainer callback: at the beginning of each batch it
wraps the forward of the model's output layers, buffers their outputs, and every
`backward_time_steps` calls it computes the loss on the buffered window, backpropagates
and detaches the state returned by the layer.  Synthetic neuronal-activity time series.
"""
from collections import defaultdict
from typing import Callable, Dict, Optional

import numpy as np
import torch
from torch import nn

torch.manual_seed(0)
np.random.seed(0)


# ------------------------------------------------------------------ neurotorch.utils
def list_insert_replace_at(__list, idx, value):
    if idx < len(__list):
        __list[idx] = value
    else:
        __list.extend([None] * (idx - len(__list)) + [value])


def recursive_detach(tensors):
    if isinstance(tensors, torch.Tensor):
        return tensors.detach()
    if isinstance(tensors, (list, tuple)):
        return type(tensors)(recursive_detach(t) for t in tensors)
    if isinstance(tensors, dict):
        return {k: recursive_detach(v) for k, v in tensors.items()}
    return tensors


def unpack_out_hh(out):
    if isinstance(out, (tuple, list)) and len(out) == 2:
        return out[0], out[1]
    return out, None


def zero_grad_params(params):
    for p in params:
        if p.grad is not None:
            p.grad.zero_()


# ------------------------------------------------------------------ neurotorch.modules
class WilsonCowanLayer(nn.Module):
    """Firing-rate (Wilson-Cowan) dynamics: r <- r(1 - dt/tau) + (1 - kappa r) sigma(W r + U x - mu) dt/tau."""

    def __init__(self, input_size, output_size, name, dt=1e-3, tau=1e-2, r=0.1, mu=0.0, std_weight=1.0):
        super().__init__()
        self.name, self.input_size, self.output_size = name, input_size, output_size
        self.dt, self.tau, self.r, self.mu = dt, tau, r, mu
        self.forward_weights = nn.Parameter(torch.randn(input_size, output_size) * std_weight / input_size ** 0.5)
        self.recurrent_weights = nn.Parameter(torch.randn(output_size, output_size) * std_weight / output_size ** 0.5)
        self.activation = torch.sigmoid

    def create_empty_state(self, batch_size=1):
        return (torch.zeros((batch_size, self.output_size)),)

    def forward(self, inputs, state=None, **kwargs):
        hh, = state if state is not None else self.create_empty_state(inputs.shape[0])
        ratio_dt_tau = self.dt / self.tau
        transition_rate = 1 - hh * self.r
        sigmoid = self.activation(hh @ self.recurrent_weights + inputs @ self.forward_weights - self.mu)
        output = hh * (1 - ratio_dt_tau) + transition_rate * sigmoid * ratio_dt_tau
        return output, (output,)


class SequentialRNN(nn.Module):
    def __init__(self, input_layers, hidden_layers, output_layers):
        super().__init__()
        self.input_layers = nn.ModuleDict({l.name: l for l in input_layers})
        self.hidden_layers = nn.ModuleDict({l.name: l for l in hidden_layers})
        self.output_layers = nn.ModuleDict({l.name: l for l in output_layers})

    def get_all_layers(self):
        return list(self.input_layers.values()) + list(self.hidden_layers.values()) + list(self.output_layers.values())

    def forward(self, inputs, **kwargs):
        time_steps = inputs.shape[1]
        hidden_states: Dict[str, Optional[tuple]] = defaultdict(lambda: None)
        outputs = defaultdict(list)
        for t in range(time_steps):
            x = inputs[:, t]
            for layer in self.get_all_layers():
                x, hidden_states[layer.name] = unpack_out_hh(layer(x, hidden_states[layer.name], t=t))
            for name in self.output_layers:
                outputs[name].append(x)
        return {name: torch.stack(seq, dim=1) for name, seq in outputs.items()}


# ------------------------------------------------------------------ neurotorch.trainers
class TrainingState:
    x_batch = y_batch = pred_batch = batch_loss = None


class Trainer:
    def __init__(self, model, callbacks, n_epochs=2):
        self.model, self.callbacks, self.n_epochs = model, callbacks, n_epochs
        self.current_training_state = TrainingState()

    def update_state_(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self.current_training_state, k, v)

    def train(self, dataloader):
        for cb in self.callbacks:
            cb.start(self)
        for epoch in range(self.n_epochs):
            self.model.train()
            for x_batch, y_batch in dataloader:
                self.update_state_(x_batch=x_batch, y_batch=y_batch)
                for cb in self.callbacks:
                    cb.on_batch_begin(self)
                pred_batch = self.model(x_batch)
                self.update_state_(pred_batch=pred_batch)
                for cb in self.callbacks:
                    cb.on_optimization_begin(self)
                    cb.on_optimization_end(self)
                    cb.on_batch_end(self)
            print(f'epoch {epoch}: batch_loss={self.current_training_state.batch_loss.item():.5f}')
        for cb in self.callbacks:
            cb.close(self)


# ------------------------------------------------------------------ neurotorch.learning_algorithms
class BPTT:
    def __init__(self, params=None, optimizer=None, criterion: Optional[Callable] = None, lr=1e-3):
        self.params, self.optimizer, self.lr = params, optimizer, lr
        self.criterion = criterion if criterion is not None else nn.MSELoss()

    def start(self, trainer, **kwargs):
        if self.params is None:
            self.params = [p for p in trainer.model.parameters() if p.requires_grad]
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(self.params, lr=self.lr, maximize=False, weight_decay=0.0)

    def apply_criterion(self, pred_batch, y_batch):
        return self.criterion(pred_batch, y_batch)

    def on_batch_begin(self, trainer, **kwargs):
        self.trainer = trainer

    def on_optimization_begin(self, trainer, **kwargs):
        pass

    def on_optimization_end(self, trainer, **kwargs):
        pass

    def on_batch_end(self, trainer, **kwargs):
        pass

    def close(self, trainer, **kwargs):
        pass


class TBPTT(BPTT):
    def __init__(self, *, backward_time_steps=None, optim_time_steps=None, **kwargs):
        super().__init__(**kwargs)
        self.output_layers = None
        self._original_forwards = {}  # {layer_name: (layer, layer.forward)}
        self.backward_time_steps = backward_time_steps
        self.optim_time_steps = optim_time_steps
        self._layers_buffer = defaultdict(list)
        self._forwards_decorated = False
        self._optim_counter = 0

    def start(self, trainer, **kwargs):
        super().start(trainer)
        self.output_layers: nn.ModuleDict = trainer.model.output_layers
        self._initialize_original_forwards()

    def on_batch_begin(self, trainer, **kwargs):
        super().on_batch_begin(trainer)
        if trainer.model.training:
            self.optimizer.zero_grad()
            self.decorate_forwards()

    def on_batch_end(self, trainer, **kwargs):
        if trainer.model.training:
            for layer_name in self._layers_buffer:
                backward_t = len(self._layers_buffer[layer_name])
                if backward_t > 0:
                    self._backward_at_t(trainer.current_training_state.x_batch.shape[1] - 1, backward_t, layer_name)
                    self.optimizer.step()
        self.undecorate_forwards()
        self._layers_buffer.clear()
        self.optimizer.zero_grad()

    def _initialize_original_forwards(self):
        for layer in self.output_layers.values():
            self._original_forwards[layer.name] = (layer, layer.forward)

    def decorate_forwards(self):
        if not self._forwards_decorated:
            self._initialize_original_forwards()
        for layer in self.output_layers.values():
            layer.forward = self._decorate_forward(layer.forward, layer.name)
        self._forwards_decorated = True

    def undecorate_forwards(self):
        for name, (layer, original_forward) in self._original_forwards.items():
            layer.forward = original_forward
        self._forwards_decorated = False

    def _decorate_forward(self, forward, layer_name: str):
        def _forward(*args, **kwargs):
            out = forward(*args, **kwargs)
            t = kwargs.get("t", None)
            if t is None:
                return out
            out_tensor, hh = unpack_out_hh(out)
            list_insert_replace_at(self._layers_buffer[layer_name], t % self.backward_time_steps, out_tensor)
            self._optim_counter += 1
            if len(self._layers_buffer[layer_name]) == self.backward_time_steps:
                self._backward_at_t(t, self.backward_time_steps, layer_name)
                out = recursive_detach(out)
            if self._optim_counter >= self.optim_time_steps:
                self._make_optim_step()
            return out
        return _forward

    def _backward_at_t(self, t: int, backward_t: int, layer_name: str):
        y_batch = self.trainer.current_training_state.y_batch[:, (t + 1) - backward_t: t + 1]
        pred_batch = torch.stack(self._layers_buffer[layer_name], dim=1)
        batch_loss = self.apply_criterion(pred_batch, y_batch)
        batch_loss.backward()  # raises
        self.trainer.update_state_(batch_loss=batch_loss.detach())
        self._layers_buffer[layer_name].clear()

    def _make_optim_step(self, **kwargs):
        self.optimizer.step()
        self.optimizer.zero_grad()
        zero_grad_params(self.params)
        self._optim_counter = 0

    def close(self, trainer, **kwargs):
        self.undecorate_forwards()


# ------------------------------------------------------------------ script
n_units, n_time_steps, batch_size = 12, 20, 4
t_axis = np.linspace(0, 4 * np.pi, n_time_steps + 1)
phases = np.random.rand(16, 1, n_units) * 2 * np.pi
activity = 0.5 + 0.4 * np.sin(t_axis[None, :, None] + phases) + 0.02 * np.random.randn(16, n_time_steps + 1, n_units)
activity = torch.tensor(activity, dtype=torch.float32)
x_all, y_all = activity[:, :-1], activity[:, 1:]
dataloader = list(zip(x_all.split(batch_size), y_all.split(batch_size)))

model = SequentialRNN(
    input_layers=[WilsonCowanLayer(n_units, n_units, name="input")],
    hidden_layers=[],
    output_layers=[WilsonCowanLayer(n_units, n_units, name="output")],
)
learning_algorithm = TBPTT(backward_time_steps=5, optim_time_steps=5, lr=5e-3)
trainer = Trainer(model, callbacks=[learning_algorithm], n_epochs=2)
trainer.train(dataloader)
