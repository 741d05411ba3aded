# expect: clean
# source: https://github.com/ShiYunyi/Meta-Weight-Net_Code-Optimization/issues/5
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MyNet(nn.Module):
    def __init__(self, in_dim=20, hidden=32, num_classes=5):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU())
        self.classifier = nn.Linear(hidden, num_classes)
        self.aux_classifier = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.classifier(self.backbone(x))


class MLP(nn.Module):
    def __init__(self, hidden_size=100):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1), nn.Sigmoid())

    def forward(self, x):
        return self.net(x)


def meta_step(module, grads, lr):
    for (name, param), grad in zip(list(module.named_parameters()), grads):
        if grad is None:
            continue
        *path, leaf = name.split(".")
        owner = module
        for p in path:
            owner = getattr(owner, p)
        del owner._parameters[leaf]
        setattr(owner, leaf, param - lr * grad)


net, meta_net = MyNet(), MLP()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
meta_optimizer = torch.optim.Adam(meta_net.parameters(), lr=1e-3)
train_x, train_y = torch.randn(64, 20), torch.randint(0, 5, (64,))
meta_x, meta_y = torch.randn(32, 20), torch.randint(0, 5, (32,))

for iteration in range(5):
    pseudo_net = MyNet()
    pseudo_net.load_state_dict(net.state_dict())
    pseudo_outputs = pseudo_net(train_x)
    pseudo_loss_vector = F.cross_entropy(pseudo_outputs, train_y, reduction="none").reshape(-1, 1)
    pseudo_weight = meta_net(pseudo_loss_vector.data)
    pseudo_loss = torch.mean(pseudo_weight * pseudo_loss_vector)
    pseudo_grads = torch.autograd.grad(pseudo_loss, pseudo_net.parameters(), create_graph=True, allow_unused=True)
    meta_step(pseudo_net, pseudo_grads, lr=0.1)

    meta_loss = F.cross_entropy(pseudo_net(meta_x), meta_y)
    meta_optimizer.zero_grad()
    meta_loss.backward()
    meta_optimizer.step()

    loss_vector = F.cross_entropy(net(train_x), train_y, reduction="none").reshape(-1, 1)
    with torch.no_grad():
        weight = meta_net(loss_vector)
    loss = torch.mean(weight * loss_vector)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"iter {iteration} loss {loss.item():.4f} meta_loss {meta_loss.item():.4f}")
