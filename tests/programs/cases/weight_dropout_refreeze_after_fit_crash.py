# expect: requires_grad_nonleaf
# shape: a hand-written RNN's recurrent weight is replaced in `_parameters` by its dropped-out copy on each training forward; freezing the layer group afterwards sets requires_grad on that computed tensor
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyRNN(nn.Module):
    def __init__(self, n_in, n_hid):
        super().__init__()
        self.weight_ih = nn.Parameter(torch.randn(n_hid, n_in) * 0.1)
        self.weight_hh = nn.Parameter(torch.randn(n_hid, n_hid) * 0.1)

    def forward(self, x):
        h = x.new_zeros(x.size(0), self.weight_hh.size(0))
        for t in range(x.size(1)):
            h = torch.tanh(x[:, t] @ self.weight_ih.t() + h @ self.weight_hh.t())
        return h


class WeightDropout(nn.Module):
    def __init__(self, module, p=0.2):
        super().__init__()
        self.module, self.p = module, p
        self.register_parameter("weight_hh_raw", nn.Parameter(module.weight_hh.data))
        module._parameters["weight_hh"] = F.dropout(self.weight_hh_raw, p=p, training=False)

    def forward(self, x):
        self.module._parameters["weight_hh"] = F.dropout(self.weight_hh_raw, p=self.p, training=self.training)
        return self.module(x)


def set_trainable(module, flag):
    for p in module.parameters():
        p.requires_grad = flag  # raises


torch.manual_seed(0)
stream = torch.randn(3 * 4 * 5, 8)
batches = [(chunk, chunk.sum(dim=(1, 2)) > 0) for chunk in stream.view(3, 4, 5, 8)]
rnn = WeightDropout(TinyRNN(8, 16))
head = nn.Linear(16, 2)
opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), lr=1e-2)
rnn.train()
for xb, yb in batches:
    loss = F.cross_entropy(head(rnn(xb)), yb.long())
    opt.zero_grad()
    loss.backward()
    opt.step()
set_trainable(rnn, False)
