# expect: clean
# shape: the error rate is logged; cross-entropy is what is backpropagated
import torch
import torch.nn as nn
import torch.nn.functional as F

net = nn.Linear(5, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(20, 5), torch.randint(0, 4, (20,))
for step in range(2):
    logits = net(x)
    loss = F.cross_entropy(logits, y)
    err = (logits.argmax(1) != y).float().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(err.item())
