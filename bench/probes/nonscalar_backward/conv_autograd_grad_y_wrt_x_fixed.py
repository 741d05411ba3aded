# expect: clean
# source: https://stackoverflow.com/questions/54754153/autograd-grad-for-tensor-in-pytorch
import torch
import torch.nn as nn
from torch.autograd import grad

torch.manual_seed(0)

batch_size, m, n = 8, 16, 4


class ConvEncoder(nn.Module):
    def __init__(self, m, n):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(1, 6, kernel_size=3, padding=1),
            nn.Tanh(),
            nn.Conv1d(6, 6, kernel_size=3, padding=1),
            nn.Tanh(),
        )
        self.head = nn.Linear(6 * m, n)

    def forward(self, x):
        h = self.convs(x.unsqueeze(1))
        return self.head(h.flatten(1))


net = ConvEncoder(m, n)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)

X = torch.randn(batch_size, m, requires_grad=True)
target = torch.randn(batch_size, n)

Y = net(X)
fit_loss = nn.functional.mse_loss(Y, target)

dY_dX = grad(outputs=Y, inputs=X, grad_outputs=torch.ones_like(Y), create_graph=True)[0]
smooth_loss = dY_dX.pow(2).mean()

loss = fit_loss + 0.1 * smooth_loss
opt.zero_grad()
loss.backward()
opt.step()
print("fit", fit_loss.item(), "smooth", smooth_loss.item())
