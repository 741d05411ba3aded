# expect: numpy_requires_grad
# shape: two metrics call `.numpy()` on outputs that require grad; the first raises, so nothing after it runs
import numpy as np
import torch
import torch.nn as nn

model = nn.Linear(4, 2)
x = torch.randn(8, 4)
out = model(x)
probs = torch.softmax(out, -1)
top = np.argmax(probs.numpy(), axis=1)  # raises
conf = out.sigmoid().numpy().mean()
print(top, conf)
