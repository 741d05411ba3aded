# expect: freed_graph
# shape: the AMP wrapper scaler.scale(loss).backward() frees like a plain backward
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler(enabled=False)
out = torch.tanh(model(torch.randn(4, 3)))
loss_a = out.mean()
loss_b = out.pow(2).mean()
scaler.scale(loss_a).backward()
scaler.scale(loss_b).backward()  # raises
scaler.step(opt)
scaler.update()
