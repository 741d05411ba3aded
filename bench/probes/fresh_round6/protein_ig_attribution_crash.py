# expect: grad_unused
# source: https://github.com/meta-pytorch/captum/issues/1141
"""Integrated-gradients attribution (captum-style) for a protein sequence classifier."""
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

TensorOrTupleOfTensors = Union[torch.Tensor, Tuple[torch.Tensor, ...]]


# ---------------------------------------------------------------- attr/_utils
def _format_tensor_into_tuples(inputs: TensorOrTupleOfTensors) -> Tuple[torch.Tensor, ...]:
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    return inputs


def _select_targets(output: torch.Tensor, target: Optional[int]) -> torch.Tensor:
    if target is None:
        return output
    return output[:, target]


def _run_forward(forward_func: Callable, inputs: Tuple[torch.Tensor, ...],
                 target: Optional[int] = None, additional_forward_args: Any = None) -> torch.Tensor:
    args = additional_forward_args if additional_forward_args is not None else ()
    output = forward_func(*inputs, *args)
    return _select_targets(output, target)


def compute_gradients(forward_fn: Callable, inputs: Tuple[torch.Tensor, ...],
                      target_ind: Optional[int] = None,
                      additional_forward_args: Any = None) -> Tuple[torch.Tensor, ...]:
    """Computes gradients of the output with respect to inputs for an arbitrary forward function."""
    with torch.autograd.set_grad_enabled(True):
        outputs = _run_forward(forward_fn, inputs, target_ind, additional_forward_args)
        assert outputs[0].numel() == 1, "Target not provided when necessary, cannot take gradient."
        grads = torch.autograd.grad(torch.unbind(outputs), inputs)  # raises
    return grads


def approximation_parameters(method: str, n_steps: int):
    if method == "riemann_trapezoid":
        step_sizes = [1.0 / (n_steps - 1)] * n_steps
        step_sizes[0] = step_sizes[-1] = 0.5 / (n_steps - 1)
        alphas = list(np.linspace(0, 1, n_steps))
        return step_sizes, alphas
    if method == "gausslegendre":
        x, w = np.polynomial.legendre.leggauss(n_steps)
        return list(0.5 * w), list(0.5 * (x + 1))
    raise ValueError(f"Approximation method {method} is not supported")


# ---------------------------------------------------------------- attr/_core
class GradientAttribution:
    def __init__(self, forward_func: Callable) -> None:
        self.forward_func = forward_func
        self.gradient_func = compute_gradients


class IntegratedGradients(GradientAttribution):
    def attribute(self, inputs: TensorOrTupleOfTensors, baselines: Optional[TensorOrTupleOfTensors] = None,
                  target: Optional[int] = None, additional_forward_args: Any = None,
                  n_steps: int = 50, method: str = "gausslegendre") -> TensorOrTupleOfTensors:
        is_inputs_tuple = isinstance(inputs, tuple)
        inputs = _format_tensor_into_tuples(inputs)
        if baselines is None:
            baselines = tuple(torch.zeros_like(inp) for inp in inputs)
        baselines = _format_tensor_into_tuples(baselines)
        attributions = self._attribute(inputs, baselines, target, additional_forward_args, n_steps, method)
        return attributions if is_inputs_tuple else attributions[0]

    def _attribute(self, inputs, baselines, target, additional_forward_args, n_steps, method):
        step_sizes, alphas = approximation_parameters(method, n_steps)
        # scale features and compute gradients. (batch size is abbreviated as bsz)
        # scaled_features' dim -> (bsz * #steps x inputs[0].shape[1:], ...)
        scaled_features_tpl = tuple(
            torch.cat([baseline + alpha * (input - baseline) for alpha in alphas], dim=0).requires_grad_()
            for input, baseline in zip(inputs, baselines))
        grads = self.gradient_func(forward_fn=self.forward_func, inputs=scaled_features_tpl,
                                   target_ind=target, additional_forward_args=additional_forward_args)
        # flattening grads so that we can multiply it with step-size
        scaled_grads = [grad.contiguous().view(n_steps, -1)
                        * torch.tensor(step_sizes).view(n_steps, 1).to(grad.device) for grad in grads]
        total_grads = tuple(
            scaled_grad.sum(dim=0).view(-1, *grad.shape[1:])
            for scaled_grad, grad in zip(scaled_grads, grads))
        return tuple(total_grad * (input - baseline)
                     for total_grad, input, baseline in zip(total_grads, inputs, baselines))


# ---------------------------------------------------------------- user model
class xAInet(nn.Module):
    def __init__(self, seq_len: int = 20, vocab: int = 24):
        super().__init__()
        self.hidden_dim = 8
        self.embedding_dim = 32
        self.embedding_layer = nn.Embedding(vocab, self.embedding_dim, padding_idx=0)
        self.encoder_layer = nn.TransformerEncoderLayer(d_model=self.embedding_dim, nhead=4,
                                                        dim_feedforward=64, dropout=0.0)
        self.transformer_encoder = nn.TransformerEncoder(self.encoder_layer, num_layers=1,
                                                         enable_nested_tensor=False)
        self.gru = nn.GRU(self.embedding_dim, self.hidden_dim, num_layers=2,
                          bidirectional=True, dropout=.2)
        self.block_seq = nn.Sequential(nn.Linear(seq_len * 2 * self.hidden_dim, 64),
                                       nn.BatchNorm1d(64),
                                       nn.LeakyReLU(),
                                       nn.Linear(64, 2))

    def forward(self, x):
        x = self.embedding_layer(x.long())
        x = self.transformer_encoder(x.permute(1, 0, 2))
        x, _ = self.gru(x)
        x = x.permute(1, 0, 2).flatten(1)
        return torch.softmax(self.block_seq(x), dim=1)


def load_sequences(n: int = 2, seq_len: int = 20, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 24, (n, seq_len), generator=g)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = xAInet().eval()
    seqs = load_sequences()
    with torch.no_grad():
        print("predicted class:", model(seqs).argmax(1).tolist())

    ig = IntegratedGradients(model)
    attributions = []
    for seq in seqs:
        inp = seq.unsqueeze(0)
        attr = ig.attribute(inp, baselines=torch.zeros_like(inp), target=1, n_steps=8)
        attributions.append(attr.sum(-1) if attr.dim() > 2 else attr)
    print("per-residue attribution:", torch.cat(attributions).shape)
