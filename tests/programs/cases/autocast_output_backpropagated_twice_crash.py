# expect: freed_graph
# shape: a layer run under CPU bfloat16 autocast saves a cast copy of its input; the loss built from its output is backpropagated twice, the second time through the graph the first one freed
import torch
import torch.nn as nn

net = nn.Linear(4, 4)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(2, 4)
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = net(x)
loss = out.float().pow(2).mean()
optimizer.zero_grad()
loss.backward()
loss.backward()  # raises
optimizer.step()
