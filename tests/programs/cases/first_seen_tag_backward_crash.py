# expect: freed_graph
# shape: a logging helper backpropagates a probe loss the first time it sees a tag (its registry starts empty, so the first call surely does); the caller then backpropagates the same forward again
import os

import torch
import torch.nn as nn


def probe_once(out, tag, seen):
    if tag not in seen:
        out.pow(2).mean().backward()
        seen[tag] = True


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2))
out = model(torch.randn(4, 5))
probe_once(out, os.environ.get("RUN_TAG", "default"), {})
out.sum().backward()  # raises
