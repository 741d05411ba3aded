# expect: clean
# shape: a transformer keeps its blocks as a ModuleList of [attention, feed-forward] ModuleLists and unpacks each pair in its loop; the decoder adds its positional embedding out of place, so decoding the same tokens twice changes nothing either LayerNorm saved
import torch
import torch.nn as nn


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.norm(x))


class Transformer(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.ModuleList([PreNorm(dim, nn.Linear(dim, dim)), PreNorm(dim, nn.Linear(dim, dim))])
            for _ in range(depth)
        ])

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return x


class Decoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 4, dim), requires_grad=False)
        self.transformer = Transformer(dim, 2)

    def forward(self, tokens):
        tokens = tokens + self.pos
        return self.transformer(tokens)


proj = nn.Linear(8, 8)
decoder, aux_decoder = Decoder(8), Decoder(8)
quant = proj(torch.randn(2, 4, 8))
rec = decoder(quant)
edges = aux_decoder(quant)
loss = rec.pow(2).mean() + edges.pow(2).mean()
loss.backward()
