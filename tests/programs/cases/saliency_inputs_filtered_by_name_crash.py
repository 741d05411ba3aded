# expect: grad_unused
# shape: the tensors to attribute are chosen from named inputs by a filtered comprehension; the padding mask is among them, and the score does not depend on it
import torch
import torch.nn as nn

torch.manual_seed(0)
embed = nn.Linear(8, 16)
scorer = nn.Linear(16, 1)
tokens = torch.randn(4, 8, requires_grad=True)
mask = torch.ones(4, 1, requires_grad=True)
named_inputs = [("tokens", tokens), ("mask", mask), ("positions", torch.arange(4.0))]
wanted = ("tokens", "mask")
inputs = [t for name, t in named_inputs if name in wanted]
score = scorer(torch.relu(embed(tokens))).sum()
grads = torch.autograd.grad(score, inputs)  # raises
