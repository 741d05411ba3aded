# expect: no_grad_fn
# shape: an MLP grows an empty ModuleList with append; every parameter of backbone and head is frozen, so the loss has no graph
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, in_features, hidden, out_features, depth=2):
        super().__init__()
        self.layers = nn.ModuleList()
        for i in range(depth):
            self.layers.append(nn.Linear(in_features if i == 0 else hidden, hidden))
        self.out = nn.Linear(hidden, out_features)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            x.relu_()
        return self.out(x)


backbone = MLP(8, 16, 16)
head = MLP(16, 16, 4)
optimizer = torch.optim.SGD([{"params": backbone.parameters()}, {"params": head.parameters(), "lr": 1e-2}], lr=0.01, momentum=0.9)
criterion = nn.CrossEntropyLoss()
for p in list(backbone.parameters()) + list(head.parameters()):
    p.requires_grad = False

for step in range(3):
    inputs = torch.randn(4, 8)
    targets = torch.randint(0, 4, (4,))
    outputs = head(backbone(inputs))
    loss = criterion(outputs, targets)
    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
