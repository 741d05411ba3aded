# expect: inplace_version
# shape: a recurrent stack keeps each layer's state in a list made as [None] * n_layers and set item by item (state[i] = s); the next time step reads its layer's state back and adds to it in place (z += k), though the previous step's einsum saved it
import torch
import torch.nn as nn


class RecurrentCell(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, state=None):
        k = torch.sigmoid(self.proj(x))
        z = x.new_zeros(x.shape) if state is None else state
        z += k
        return torch.einsum("nd,nd->nd", x, z), z


class Stack(nn.Module):
    def __init__(self, dim, depth=2):
        super().__init__()
        self.layers = nn.ModuleList([RecurrentCell(dim) for _ in range(depth)])

    def forward(self, x, state=None):
        if state is None:
            state = [None] * len(self.layers)
        for i, layer in enumerate(self.layers):
            x, s = layer(x, state[i])
            state[i] = s
        return x, state


model = Stack(8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
seq = torch.randn(5, 4, 8)
state = None
losses = []
for t in range(seq.shape[0]):
    out, state = model(seq[t], state)
    losses.append(out.pow(2).mean())
loss = torch.stack(losses).mean()
opt.zero_grad()
loss.backward()  # raises
opt.step()
