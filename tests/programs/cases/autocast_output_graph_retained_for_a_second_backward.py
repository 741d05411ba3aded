# expect: clean
# shape: the same autocast layer whose graph the first backward keeps (retain_graph=True): the second backward finds it
import torch
import torch.nn as nn

net = nn.Linear(4, 4)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(2, 4)
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = net(x)
loss = out.float().pow(2).mean()
optimizer.zero_grad()
loss.backward(retain_graph=True)
loss.backward()
optimizer.step()
