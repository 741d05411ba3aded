# expect: clean
# shape: x.to(y.dtype) with y's dtype not known may be x itself: nothing says the optimizer gets a
# non-leaf
import json
import torch

dt = getattr(torch, json.loads('"float64"'))        # a dtype the analyser does not know
x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
y = torch.zeros(3).to(dt)                          # float64
w = x.to(y.dtype)                                  # float64 already: x itself, a leaf
opt = torch.optim.SGD([w], lr=0.1)
(w * 2).sum().backward()
opt.step()
