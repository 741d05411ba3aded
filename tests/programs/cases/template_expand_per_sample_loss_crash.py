# expect: nonscalar_backward
# shape: a learned template expanded to the batch with expand(b, -1, -1), compared per sample in chunks of a large literal size; the per-sample distances reach backward unreduced
import torch
import torch.nn as nn


class TemplateMatcher(nn.Module):
    def __init__(self, n_points=16, dim=3, chunk=131072):
        super().__init__()
        self.template = nn.Parameter(torch.randn(n_points, dim) * 0.1)
        self.chunk = chunk

    def forward(self, points):
        out = []
        for start in range(0, points.shape[0], self.chunk):
            block = points[start:start + self.chunk]
            expanded = self.template[None].expand(block.shape[0], -1, -1)
            out.append((block - expanded).pow(2).sum(dim=(1, 2)))
        return torch.cat(out)


torch.manual_seed(0)
matcher = TemplateMatcher()
optimizer = torch.optim.Adam(matcher.parameters(), lr=1e-2)
clouds = torch.randn(8, 16, 3)
distances = matcher(clouds)
optimizer.zero_grad()
distances.backward()  # raises
optimizer.step()
