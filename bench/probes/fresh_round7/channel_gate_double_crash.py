# expect: nonleaf_optimizer
# source: https://github.com/pytorch/pytorch/issues/20089
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

# the rest of the pipeline (ODE features) is float64, so the net runs in double
DTYPE = torch.float64


class ChannelGate(nn.Module):
    def __init__(self, channels=10):
        super(ChannelGate, self).__init__()
        self.w = nn.Parameter(torch.ones(channels)).to(DTYPE)

    def forward(self, x):
        return x * torch.sigmoid(self.w)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(20, 10).to(DTYPE)
        self.gate = ChannelGate(10)
        self.fc2 = nn.Linear(10, 1).to(DTYPE)

    def forward(self, x):
        return self.fc2(self.gate(F.relu(self.fc1(x))))


net = Net()
print([name for name, _ in net.named_parameters()])
print(net.gate.w.grad_fn)

# train the gate together with the linear layers
params = list(net.parameters()) + [net.gate.w]
optimizer = torch.optim.Adam(params, lr=1e-2)  # raises

x = torch.randn(64, 20, dtype=DTYPE)
y = x[:, :3].sum(dim=1, keepdim=True)

for epoch in range(100):
    optimizer.zero_grad()
    loss = F.mse_loss(net(x), y)
    loss.backward()
    optimizer.step()
    if epoch % 20 == 0:
        print(epoch, loss.item())

print("gate:", torch.sigmoid(net.gate.w).detach())
