# expect: clean
# shape: the probe keeps the graph, so the caller may backpropagate the same forward again
import os

import torch
import torch.nn as nn


def probe_once(out, tag, seen):
    if tag not in seen:
        out.pow(2).mean().backward(retain_graph=True)
        seen[tag] = True


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2))
out = model(torch.randn(4, 5))
probe_once(out, os.environ.get("RUN_TAG", "default"), {})
out.sum().backward()
