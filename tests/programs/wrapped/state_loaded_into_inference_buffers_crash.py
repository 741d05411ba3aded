# expect: inference_tensor
# shape: observation statistics are computed in a helper decorated `@torch.inference_mode()`, which registers them as buffers of a normalisation module; loading a checkpoint into the module later copies into those buffers in place, outside inference mode
import torch
from torch import nn


class ObservationNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.initialized = False
        self.gain = nn.Parameter(torch.ones(3))

    @torch.inference_mode()
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
norm.load_state_dict(checkpoint)  # raises
loss = norm(torch.randn(2, 3)).pow(2).mean()
loss.backward()
