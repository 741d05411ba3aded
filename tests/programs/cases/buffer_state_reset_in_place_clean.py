# expect: clean
# shape: the reset also detaches the buffer in place, so no step reaches the one before
import torch
import torch.nn as nn


class StatefulLayer(nn.Module):
    def __init__(self, state_names, size):
        super().__init__()
        for name in state_names:
            self.register_buffer(name, torch.zeros(size))

    def reset_states(self):
        for _, buf in self.named_buffers():
            buf.zero_().detach_()


class LeakyIntegrator(StatefulLayer):
    def __init__(self, size, decay=0.9):
        super().__init__(["v_mem"], size)
        self.decay = decay

    def forward(self, x):
        v = self.decay * self.v_mem + x
        self.v_mem = v
        return torch.tanh(v)


torch.manual_seed(0)
encoder = nn.Linear(6, 4)
layer = LeakyIntegrator((8, 4))
opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
for step in range(3):
    layer.reset_states()
    opt.zero_grad()
    out = layer(encoder(torch.randn(8, 6)))
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
