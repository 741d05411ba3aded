# expect: clean
# shape: the same leaky neuron layer keeps its membrane state in a namedtuple (defaults set the old way, on __new__) and detaches it between chunks (truncated backpropagation through time)
from collections import namedtuple

import torch
import torch.nn as nn

NeuronState = namedtuple("NeuronState", "v i")
Params = namedtuple("Params", ["tau", "v_th"])
Params.__new__.__defaults__ = (torch.as_tensor(0.9), torch.as_tensor(1.0))


def step(x, state, p):
    v = p.tau * state.v + state.i
    i = 0.5 * state.i + x
    return torch.sigmoid(v - p.v_th), NeuronState(v=v, i=i)


enc = nn.Linear(6, 8)
opt = torch.optim.SGD(enc.parameters(), lr=0.1)
p = Params()
state = NeuronState(torch.zeros(4, 8), torch.zeros(4, 8))
stream = torch.randn(3, 5, 4, 6)
for chunk in stream:
    outs = []
    for t in range(chunk.shape[0]):
        z, state = step(enc(chunk[t]), state, p)
        outs.append(z)
    loss = torch.stack(outs).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    state = NeuronState(v=state.v.detach(), i=state.i.detach())
