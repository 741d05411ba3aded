# expect: nonleaf_optimizer
# source: https://github.com/pytorch/pytorch/issues/38198
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class WeightDropout(nn.Module):
    "A module that wraps another layer in which some weights will be replaced by 0 during training."

    def __init__(self, module, weight_p, layer_names=("weight_hh_l0",)):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, list(layer_names)
        self.idxs = [] if hasattr(self.module, "_flat_weights_names") else None
        for layer in self.layer_names:
            # Makes a copy of the weights of the selected layers.
            w = getattr(self.module, layer)
            self.register_parameter(f"{layer}_raw", nn.Parameter(w.data))
            self.module._parameters[layer] = F.dropout(w, p=self.weight_p, training=False)
            if self.idxs is not None:
                self.idxs.append(self.module._flat_weights_names.index(layer))
        if isinstance(self.module, nn.RNNBase):
            self.module.flatten_parameters = self._do_nothing

    def _setweights(self):
        "Apply dropout to the raw weights."
        for i, layer in enumerate(self.layer_names):
            raw_w = getattr(self, f"{layer}_raw")
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=self.training)
            if self.idxs is not None:
                self.module._flat_weights[self.idxs[i]] = self.module._parameters[layer]

    def forward(self, *args):
        self._setweights()
        return self.module(*args)

    def _do_nothing(self):
        return


class Tagger(nn.Module):
    def __init__(self, n_in=6, n_hid=16, n_out=3):
        super().__init__()
        self.rnn = WeightDropout(nn.LSTM(n_in, n_hid, batch_first=True), weight_p=0.3)
        self.head = nn.Linear(n_hid, n_out)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out)


x = torch.randn(8, 12, 6)
y = torch.randint(0, 3, (8, 12))
model = Tagger()


def train(opt, steps):
    model.train()
    for step in range(steps):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 3), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


opt = torch.optim.Adam(model.parameters(), lr=1e-2)
print("stage 1 loss:", train(opt, 5))

# stage 2: fine-tune with plain SGD and a smaller step size
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)  # raises
print("stage 2 loss:", train(opt, 5))
