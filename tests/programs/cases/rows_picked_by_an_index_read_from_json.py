# expect: clean
# shape: rows picked with an index read from a JSON config (a list at run time, which GradGuard cannot see) are a copy: shifting them in place leaves x, which a product saved, as it was; an index not known may be an array, so no change of x is claimed
import json

import torch

weight = torch.randn(4, 3, requires_grad=True)
features = torch.randn(4, 3)
score = (weight * features).sum()
picked = features[json.loads('{"rows": [0, 2]}')["rows"]]
picked += 1.0
score.backward()
