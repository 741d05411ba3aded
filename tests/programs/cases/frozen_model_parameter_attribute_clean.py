# expect: clean
# shape: the prompt is trained again after the backbone is frozen, so the loss has a graph
import torch
import torch.nn as nn


class PromptedEncoder(nn.Module):
    def __init__(self, dim=8, depth=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.prompt = nn.Parameter(torch.zeros(1, dim))

    def forward(self, x):
        x = x + self.prompt
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


torch.manual_seed(0)
model = PromptedEncoder()
for p in model.parameters():
    p.requires_grad = False
model.prompt.requires_grad = True
x = torch.randn(4, 8)
loss = model(x).pow(2).mean()
loss.backward()
