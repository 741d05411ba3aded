# expect: clean
# shape: the second optimizer is made after switching to eval mode, where the dropped-out weight is the raw parameter itself
import torch
import torch.nn as nn
import torch.nn.functional as F


class WeightDrop(nn.Module):
    def __init__(self, module, names, p):
        super().__init__()
        self.module, self.names, self.p = module, names, p
        for name in names:
            w = getattr(module, name)
            self.register_parameter(name + "_raw", nn.Parameter(w.data))
            module._parameters[name] = F.dropout(w, p=p, training=False)

    def forward(self, x):
        for name in self.names:
            raw = getattr(self, name + "_raw")
            self.module._parameters[name] = F.dropout(raw, p=self.p, training=self.training)
        return self.module(x)


torch.manual_seed(0)
rnn = WeightDrop(nn.LSTM(6, 16, batch_first=True), ["weight_hh_l0"], p=0.3)
head = nn.Linear(16, 3)
model = nn.ModuleDict({"rnn": rnn, "head": head})
x, y = torch.randn(4, 7, 6), torch.randint(0, 3, (4,))


def train(opt, steps):
    model.train()
    for _ in range(steps):
        out, _ = model["rnn"](x)
        loss = F.cross_entropy(model["head"](out[:, -1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


train(torch.optim.Adam(model.parameters(), lr=1e-2), 3)
model.eval()
model["rnn"](x)
train(torch.optim.SGD(model.parameters(), lr=1e-3), 3)
