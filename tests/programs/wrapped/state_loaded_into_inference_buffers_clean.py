# expect: clean
# shape: the twin of state_loaded_into_inference_buffers_crash.py whose statistics are computed under `torch.no_grad()`: its buffers are ordinary tensors, and loading the checkpoint copies into them
import torch
from torch import nn


class ObservationNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.initialized = False
        self.gain = nn.Parameter(torch.ones(3))

    @torch.no_grad()
    def init_stats(self, samples):
        self.register_buffer("loc", samples.mean(0))
        self.register_buffer("scale", samples.std(0))
        self.initialized = True

    def forward(self, obs):
        return self.gain * (obs - self.loc) / self.scale


torch.manual_seed(0)
norm = ObservationNorm()
norm.init_stats(torch.randn(64, 3))
checkpoint = {"gain": torch.ones(3), "loc": torch.zeros(3), "scale": torch.ones(3)}
norm.load_state_dict(checkpoint)
loss = norm(torch.randn(2, 3)).pow(2).mean()
loss.backward()
