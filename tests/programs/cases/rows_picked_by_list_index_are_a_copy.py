# expect: clean
# shape: rows picked with a list index (x[[0, 2]]) are a copy: shifting them in place leaves x, which a product saved for backward, as it was
import torch

weight = torch.randn(4, 3, requires_grad=True)
features = torch.randn(4, 3)
score = (weight * features).sum()
picked = features[[0, 2]]
picked += 1.0
score.backward()
print(picked.shape)
