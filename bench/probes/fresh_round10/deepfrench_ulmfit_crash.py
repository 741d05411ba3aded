# expect: requires_grad_nonleaf
# source: https://github.com/tchambon/deepfrench/issues/1
"""French ULMFiT notebook: an AWD-LSTM-style language model with weight-dropped
recurrent weights (fastai v1 WeightDropout) is trained on a synthetic French
token stream with all layers trainable, then frozen again to fit only the
decoder for a few more steps (gradual unfreezing schedule)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SimpleRNN(nn.Module):
    def __init__(self, n_in, n_hid):
        super().__init__()
        self.weight_ih = nn.Parameter(torch.randn(n_hid, n_in) * 0.1)
        self.weight_hh = nn.Parameter(torch.randn(n_hid, n_hid) * 0.1)

    def forward(self, x):
        h = x.new_zeros(x.size(0), self.weight_hh.size(0))
        outs = []
        for t in range(x.size(1)):
            h = torch.tanh(x[:, t] @ self.weight_ih.t() + h @ self.weight_hh.t())
            outs.append(h)
        return torch.stack(outs, 1)


class WeightDropout(nn.Module):
    "A module that warps another layer in which some weights will be replaced by 0 during training."
    def __init__(self, module, weight_p, layer_names=("weight_hh",)):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        for layer in self.layer_names:
            w = getattr(self.module, layer)
            self.register_parameter(f"{layer}_raw", nn.Parameter(w.data))
            self.module._parameters[layer] = F.dropout(w, p=self.weight_p, training=False)

    def _setweights(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f"{layer}_raw")
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=self.training)

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)


def requires_grad(m, b):
    for p in list(m.parameters()):
        p.requires_grad = b  # raises


vocab, emb_sz, n_hid = 50, 16, 32
encoder = nn.Embedding(vocab, emb_sz)
rnn = WeightDropout(SimpleRNN(emb_sz, n_hid), weight_p=0.2)
decoder = nn.Linear(n_hid, vocab)
layer_groups = [nn.ModuleList([encoder, rnn]), decoder]
model = nn.ModuleList([encoder, rnn, decoder])

def fit(n_steps, lr):
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    for step in range(n_steps):
        x, y = tokens[:, :-1], tokens[:, 1:]
        logits = decoder(rnn(encoder(x)))
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


tokens = torch.randint(0, vocab, (8, 13))
# learn = language_model_learner(data_lm, pretrained_fnames=None, drop_mult=0)
print("lm loss %.4f" % fit(5, 1e-2))       # learn.fit_one_cycle(1, 1e-2)

# learn.freeze(): only the decoder stays trainable
requires_grad(layer_groups[0], False)
print("head loss %.4f" % fit(3, 1e-3), "trainable:", sum(p.requires_grad for p in model.parameters()))
