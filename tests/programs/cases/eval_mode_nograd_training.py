# expect: no_grad_fn
# shape: a training step left inside the validation loop's no_grad block
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model.eval()
with torch.no_grad():
    for batch in range(2):
        out = model(torch.randn(4, 3))
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()  # raises
        opt.step()
