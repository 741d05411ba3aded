# expect: inplace_version
# shape: rows picked with a slice (x[0:2]) are a view: shifting them in place modifies x, which the product saved for backward
import torch

weight = torch.randn(4, 3, requires_grad=True)
features = torch.randn(4, 3)
score = (weight * features).sum()
picked = features[0:2]
picked += 1.0
score.backward()  # raises
print(picked.shape)
