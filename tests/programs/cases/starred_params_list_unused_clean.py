# expect: clean
# shape: the same list of tensors, the output computed from every one of them: each has a gradient
import torch
from torch import nn


def jacobian_rows(model, x, scale, shift):
    params = [*model.parameters(), scale, shift]
    out = model(x).squeeze(-1) * scale + shift
    rows = []
    for i in range(out.numel()):
        grads = torch.autograd.grad(out[i], params, retain_graph=True)
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    scale = nn.Parameter(torch.ones(1))
    shift = nn.Parameter(torch.zeros(1))
    print(jacobian_rows(model, torch.randn(2, 3), scale, shift).shape)
