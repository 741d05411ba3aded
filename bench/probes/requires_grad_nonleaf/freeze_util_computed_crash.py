# expect: requires_grad_nonleaf
# source: https://github.com/mit-ll-responsible-ai/responsible-ai-toolbox/issues/24
from typing import Callable, Dict, Union

import torch
import torch.nn as nn


def freeze(*items: Union[nn.Module, torch.Tensor]) -> Callable[[], None]:
    """Set requires_grad=False on the given modules/tensors; returns a restore fn."""
    param_states: Dict[torch.Tensor, bool] = {}

    for item in items:
        if isinstance(item, torch.Tensor):
            params = [item]
        else:
            params = list(item.parameters())
        for param in params:
            if param not in param_states:
                param_states[param] = param.requires_grad
                param.requires_grad_(False)  # raises

    def restore_state():
        for p, requires_grad in param_states.items():
            p.requires_grad_(requires_grad)

    return restore_state


torch.manual_seed(0)

encoder = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
head = nn.Linear(4, 2)

x = torch.randn(32, 8)
y = torch.randint(0, 2, (32,))

scale = 2 * torch.arange(4.0, requires_grad=True)

restore = freeze(encoder, scale)
try:
    feats = encoder(x) * scale
    loss = nn.functional.cross_entropy(head(feats), y)
    loss.backward()
finally:
    restore()

print("head grad norm:", head.weight.grad.norm().item())
print("encoder grads:", [p.grad for p in encoder.parameters()])
