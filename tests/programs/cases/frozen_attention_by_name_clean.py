# expect: clean
# shape: every parameter of a model with an `nn.MultiheadAttention` is frozen by a loop over `named_parameters()` (the attention's `in_proj_weight` and `out_proj` included), so its output requires no grad and converts to numpy
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.attn(x, x, x)[0])


def main():
    model = Encoder()
    for name, p in model.named_parameters():
        p.requires_grad = False
    out = model(torch.randn(3, 2, 8))
    print(out.sum().numpy())


if __name__ == "__main__":
    main()
