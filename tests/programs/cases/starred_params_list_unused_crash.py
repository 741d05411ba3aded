# expect: grad_unused
# shape: the tensors to differentiate are listed as `[*model.parameters(), scale, shift]`; the output uses the model and `scale` only, so `autograd.grad` finds `shift` unused
import torch
from torch import nn


def jacobian_rows(model, x, scale, shift):
    params = [*model.parameters(), scale, shift]
    out = model(x).squeeze(-1) * scale
    rows = []
    for i in range(out.numel()):
        grads = torch.autograd.grad(out[i], params, retain_graph=True)  # raises
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    scale = nn.Parameter(torch.ones(1))
    shift = nn.Parameter(torch.zeros(1))
    print(jacobian_rows(model, torch.randn(2, 3), scale, shift).shape)
