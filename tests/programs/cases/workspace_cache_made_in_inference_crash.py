# expect: inference_tensor
# shape: a workspace buffer is allocated by an evaluation pass under inference_mode and reused while its shape matches; the training step then updates it in place outside inference mode
import torch
import torch.nn as nn


class StreamingNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.workspace = None

    def forward(self, x):
        if self.workspace is None or self.workspace.shape != x.shape:
            self.workspace = torch.zeros_like(x)
        self.workspace.copy_(x)  # raises
        self.workspace.mul_(0.5)
        return self.proj(x) + self.workspace


torch.manual_seed(0)
model = StreamingNorm(8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batch = torch.randn(4, 8)
with torch.inference_mode():
    warmup = model(batch)
for step in range(2):
    out = model(batch)
    loss = out.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
