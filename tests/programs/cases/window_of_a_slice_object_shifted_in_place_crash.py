# expect: inplace_version
# shape: a window taken with a slice object of drawn bounds (x[slice(start, start + 3)]) is a view, as x[start:start + 3] is; shifting it in place modifies x, which a product saved for backward
import random

import torch

weight = torch.randn(6, 3, requires_grad=True)
features = torch.randn(6, 3)
score = (weight * features).sum()
start = random.randint(0, 2)
window = features[slice(start, start + 3)]
window += 1.0
score.backward()  # raises
