# expect: inplace_version
# shape: relu_ overwrites the output that sigmoid saved
import torch

x = torch.randn(4, requires_grad=True)
y = torch.sigmoid(x)
y.relu_()
y.sum().backward()  # raises
