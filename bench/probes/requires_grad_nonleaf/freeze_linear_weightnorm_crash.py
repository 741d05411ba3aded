# expect: requires_grad_nonleaf
# source: https://github.com/facebookresearch/fairscale/issues/1126
import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = weight_norm(nn.Linear(4 * dim, dim))
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class Model(nn.Module):
    def __init__(self, dim=16, depth=3, n_out=5):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, n_out)

    def forward(self, x):
        return self.head(self.blocks(x))


def freeze_linear_layers(model, freeze=True):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not name.startswith("head"):
            module.weight.requires_grad = not freeze  # raises
            if module.bias is not None:
                module.bias.requires_grad = not freeze


model = Model()
freeze_linear_layers(model, freeze=True)

trainable = [p for p in model.parameters() if p.requires_grad]
print("trainable tensors:", len(trainable))
opt = torch.optim.SGD(trainable, lr=0.1)

x = torch.randn(64, 16)
y = torch.randint(0, 5, (64,))
for step in range(5):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
