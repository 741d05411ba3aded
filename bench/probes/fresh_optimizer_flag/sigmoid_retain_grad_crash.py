# expect: requires_grad_nonleaf
# source: https://github.com/pytorch/pytorch/issues/3890
import torch
import numpy as np
from torch.autograd import Variable

torch.manual_seed(0)
np.random.seed(0)

# gates of a tiny logistic "attention" layer; I want d(loss)/d(gate) for every step
W = Variable(torch.randn(5, 3) * 0.5, requires_grad=True)
inputs = Variable(torch.from_numpy(np.random.randn(8, 5).astype(np.float32)))
targets = Variable(torch.from_numpy((np.random.rand(8, 3) > 0.5).astype(np.float32)))

gate_grads = []
for step in range(3):
    x = inputs @ W
    s = torch.sigmoid(x)
    s.requires_grad = True  # raises
    s.retain_grad()
    total = torch.sum((s - targets) ** 2)
    total.backward()
    assert(s.grad is not None)
    gate_grads.append(s.grad.abs().mean().item())

    with torch.no_grad():
        W -= 0.1 * W.grad
    W.grad.zero_()
    print('step', step, 'loss', total.item(), 'mean |dL/ds|', gate_grads[-1])

gate_grads = np.array(gate_grads)
print('gate gradient trend:', np.round(gate_grads, 4))
print('relative change:', (gate_grads[-1] - gate_grads[0]) / gate_grads[0])
