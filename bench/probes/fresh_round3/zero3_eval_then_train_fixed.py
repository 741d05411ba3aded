# expect: clean
# source: https://github.com/snowflakedb/ArcticTraining/pull/265
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
WORLD_SIZE = 2
PERSISTENCE_THRESHOLD = 10_000


class PartitionedLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        full = torch.randn(out_features, in_features) * in_features ** -0.5
        self.shape = (out_features, in_features)
        self.partitions = list(full.flatten().chunk(WORLD_SIZE))
        self.weight = nn.Parameter(torch.empty(0))
        self.bias = nn.Parameter(torch.zeros(out_features))
        self.persistent = full.numel() <= PERSISTENCE_THRESHOLD
        self.register_forward_pre_hook(self.fetch_sub_module)
        self.register_forward_hook(self.release_sub_module)

    @staticmethod
    def fetch_sub_module(module, inputs):
        if module.weight.numel() == 0:
            module.weight.data = torch.cat(module.partitions).view(module.shape)

    @staticmethod
    def release_sub_module(module, inputs, output):
        if not module.persistent:
            module.partitions = list(module.weight.data.flatten().chunk(WORLD_SIZE))
            module.weight.data = torch.empty(0)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


model = nn.Sequential(PartitionedLinear(16, 32), nn.GELU(), PartitionedLinear(32, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
x_train, y_train = torch.randn(128, 16), torch.randint(0, 4, (128,))
x_eval, y_eval = torch.randn(32, 16), torch.randint(0, 4, (32,))


@torch.no_grad()
def evaluate():
    model.eval()
    loss = F.cross_entropy(model(x_eval), y_eval).item()
    model.train()
    return loss


print("eval loss before training:", evaluate())
for epoch in range(5):
    for i in range(0, 128, 32):
        loss = F.cross_entropy(model(x_train[i:i + 32]), y_train[i:i + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} train {loss.item():.3f} eval {evaluate():.3f}")
