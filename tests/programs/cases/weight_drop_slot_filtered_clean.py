# expect: clean
# shape: the same weight dropout done as AWD-LSTM does it: the weight leaves `_parameters` (`del`), its raw copy is registered, and the computed weight is a plain attribute; every tensor the optimizer gets is a leaf
import torch
import torch.nn.functional as F
from torch import nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.proj = nn.Linear(8, 8)
        self.mix = nn.Linear(8, 8)
        self.gate = nn.Linear(8, 8)
        self.out = nn.Linear(8, 2)
        weight = self.mix.weight
        del self.mix._parameters["weight"]
        self.mix.register_parameter("weight_raw", nn.Parameter(weight.data))
        self.mix.weight = F.dropout(self.mix.weight_raw, p=0.1, training=True)

    def forward(self, tokens):
        h = self.proj(self.embed(tokens))
        return self.out(torch.sigmoid(self.gate(h)) * self.mix(h))


def main():
    torch.manual_seed(0)
    model = Encoder()
    trainable = filter(lambda p: p.requires_grad, model.parameters())
    opt = torch.optim.Adam(trainable, lr=1e-3)
    loss = model(torch.randint(0, 20, (4, 5))).pow(2).mean()
    loss.backward()
    opt.step()


if __name__ == "__main__":
    main()
