# expect: requires_grad_nonleaf
# source: https://github.com/liuyuisanai/trojans-face-recognizer/issues/3
# Training the stochastic-depth blocks with data parallelism.  To debug without
# GPUs I replicate the model per "device" like nn.parallel.replicate does
# and scatter the batch over the replicas.
import torch
import torch.nn as nn

torch.manual_seed(0)


class BlockA(nn.Module):
    def __init__(self, channels, keep_prob=0.8):
        super().__init__()
        self.branch0 = nn.Sequential(nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels), nn.ReLU())
        self.branch1 = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.stem = nn.Conv2d(2 * channels, channels, 1, bias=False)
        self.m = torch.distributions.bernoulli.Bernoulli(torch.Tensor([keep_prob]))
        self.relu = nn.ReLU()

    def forward(self, x):
        a = torch.equal(self.m.sample(), torch.ones(1))
        identity = x.clone()
        if self.training:
            if a:
                for item in self.modules():
                    if isinstance(item, nn.Conv2d):
                        item.weight.requires_grad = True  # raises
                out = self.stem(torch.cat((self.branch0(x), self.branch1(x)), 1))
                return self.relu(out + identity)
            for item in self.modules():
                if isinstance(item, nn.Conv2d):
                    item.weight.requires_grad = False
            return self.relu(identity)
        return self.relu(self.stem(torch.cat((self.branch0(x), self.branch1(x)), 1)) + identity)


def replicate(module):
    replica = module._replicate_for_data_parallel()
    for name, p in module._parameters.items():
        replica._parameters[name] = None if p is None else p.view_as(p)
    for name, child in module._modules.items():
        replica._modules[name] = replicate(child)
    return replica


def data_parallel(module, inputs, n_devices=2):
    chunks = inputs.chunk(n_devices)
    replicas = [replicate(module) for _ in chunks]
    return torch.cat([r(c) for r, c in zip(replicas, chunks)], 0)


model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), BlockA(16), BlockA(16),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,))

for step in range(5):
    logits = data_parallel(model, x)
    loss = nn.functional.cross_entropy(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
