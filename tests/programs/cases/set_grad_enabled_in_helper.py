# expect: no_grad_fn
# shape: a set-up helper switches gradients off globally (torch.set_grad_enabled), and the mode outlives the call
import torch
import torch.nn as nn

torch.manual_seed(29)


def setup(eval_only):
    torch.set_grad_enabled(not eval_only)
    model = nn.Linear(2, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


model, opt = setup(eval_only=True)
x, y = torch.randn(5, 2), torch.randn(5, 1)
loss = nn.functional.mse_loss(model(x), y)
opt.zero_grad()
loss.backward()  # raises
opt.step()
print(loss.item())
