# expect: clean
# shape: the twin of freeze_by_parameter_name_crash.py whose prefix is the head's real path (`head.`): its parameters stay trainable and the loss has a graph
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(torch.relu(self.proj(x)))


class Classifier(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.encoder = Encoder(dim)
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(dim, classes))

    def forward(self, x):
        return self.head(self.encoder(x))


def freeze_backbone(model, trainable=("head.",)):
    for name, param in model.named_parameters():
        if not name.startswith(trainable):
            param.requires_grad = False


def main():
    torch.manual_seed(0)
    model = Classifier(8, 3)
    freeze_backbone(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


if __name__ == "__main__":
    main()
