# expect: no_grad_fn
# shape: the error rate (argmax != label) optimised directly
import torch
import torch.nn as nn

net = nn.Linear(5, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(20, 5), torch.randint(0, 4, (20,))
for step in range(2):
    logits = net(x)
    loss = (logits.argmax(1) != y).float().mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
