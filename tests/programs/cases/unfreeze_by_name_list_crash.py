# expect: no_grad_fn
# shape: an adapter fine-tuning script freezes every parameter whose name contains none of the trainable keys (`any(k in name for k in keys)`); the keys name a module the model does not have, so nothing stays trainable and the loss has no graph
import torch
from torch import nn


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)
        self.adapter = nn.Linear(6, 6)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        h = self.norm(torch.relu(self.stem(x)))
        return self.head(h + self.adapter(h))


def mark_trainable(model, keys=("lora_", "prompt")):
    for name, param in model.named_parameters():
        param.requires_grad = any(k in name for k in keys)


torch.manual_seed(0)
model = Backbone()
mark_trainable(model)
x, y = torch.randn(4, 6), torch.randint(0, 2, (4,))
loss = nn.functional.cross_entropy(model(x), y)
loss.backward()  # raises
