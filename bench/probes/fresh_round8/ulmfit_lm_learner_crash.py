# expect: requires_grad_nonleaf
# source: https://github.com/fastai/fastai/issues/1259
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class _Dropout(torch.autograd.Function):
    """Dropout as an autograd Function (torch.nn._functions.dropout)."""
    @staticmethod
    def forward(ctx, input, p=0.5, train=False):
        ctx.noise = None
        output = input.clone()
        if p > 0 and train:
            ctx.noise = input.new(input.size()).bernoulli_(1 - p).div_(1 - p)
            output.mul_(ctx.noise)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        return (grad_output if ctx.noise is None else grad_output * ctx.noise), None, None

def dropout(input, p=0.5, training=False):
    return _Dropout.apply(input, p, training)


class WeightDropout(nn.Module):
    "A module that warps another layer in which some weights will be replaced by 0 during training."
    def __init__(self, module, weight_p, layer_names=('weight_hh_l0',)):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        for layer in self.layer_names:
            # Makes a copy of the weights of the selected layers.
            w = getattr(self.module, layer)
            self.register_parameter(f'{layer}_raw', nn.Parameter(w.data))
            self.module._parameters[layer] = dropout(w, p=self.weight_p, training=False)

    def forward(self, *args):
        for layer in self.layer_names:
            raw_w = getattr(self, f'{layer}_raw')
            self.module._parameters[layer] = dropout(raw_w, p=self.weight_p, training=self.training)
        return self.module.forward(*args)


def requires_grad(m, b):
    for p in m.parameters(): p.requires_grad = b  # raises


class LanguageLearner:
    def __init__(self, vocab_sz=50, emb_sz=16, n_hid=24):
        self.encoder = nn.Embedding(vocab_sz, emb_sz)
        self.rnns = nn.ModuleList([WeightDropout(nn.LSTM(emb_sz, n_hid), 0.2),
                                   WeightDropout(nn.LSTM(n_hid, emb_sz), 0.2)])
        self.decoder = nn.Linear(emb_sz, vocab_sz)
        self.decoder.weight = self.encoder.weight
        self.layer_groups = [[self.rnns[0]], [self.rnns[1]], [self.encoder, self.decoder]]

    def freeze_to(self, n):
        for g in self.layer_groups[:n]: [requires_grad(l, False) for l in g]
        for g in self.layer_groups[n:]: [requires_grad(l, True) for l in g]
        params = list({id(p): p for g in self.layer_groups for l in g for p in l.parameters() if p.requires_grad}.values())
        self.opt = torch.optim.Adam(params, lr=1e-2)

    def freeze(self): self.freeze_to(-1)


    def step(self, x, y):
        h = self.encoder(x)
        for rnn in self.rnns: h, _ = rnn(h)
        loss = F.cross_entropy(self.decoder(h).flatten(0, 1), y.flatten())
        self.opt.zero_grad(); loss.backward(); self.opt.step()
        return loss.item()


learn = LanguageLearner()
learn.freeze()
tokens = torch.randint(0, 50, (12, 4))
print("loss:", learn.step(tokens[:-1], tokens[1:]))
