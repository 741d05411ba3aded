# expect: clean
# shape: a decoding helper adds a positional offset to a copy of the tokens it is given, then normalises it; the loss sums two decodings of the same tokens in one expression, and neither call changes what the other's LayerNorm saved
import torch
import torch.nn as nn

proj, norm = nn.Linear(8, 8), nn.LayerNorm(8)
offset = torch.randn(8)


def decode(tokens):
    tokens = tokens + offset
    return norm(tokens)


tokens = proj(torch.randn(2, 8))
loss = decode(tokens).pow(2).sum() + decode(tokens).pow(2).sum()
loss.backward()
