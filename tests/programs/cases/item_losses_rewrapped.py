# expect: no_grad_fn
# shape: per-task losses taken out with .item() and put back into a new tensor to average them
import torch
import torch.nn as nn

model = nn.Linear(3, 1)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
tasks = [(torch.randn(8, 3), torch.randn(8, 1)) for _ in range(3)]
for epoch in range(2):
    losses = []
    for x, y in tasks:
        losses.append(nn.functional.mse_loss(model(x), y).item())
    loss = torch.tensor(losses).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
