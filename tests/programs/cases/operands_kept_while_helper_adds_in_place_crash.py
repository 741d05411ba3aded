# expect: inplace_version
# shape: a decoding helper adds a positional offset to the tokens it is given in place, then normalises them; the loss sums two decodings of the same tokens in one expression, so the first decoding's LayerNorm saved the tokens that the second call's `+=` then modified
import torch
import torch.nn as nn

proj, norm = nn.Linear(8, 8), nn.LayerNorm(8)
offset = torch.randn(8)


def decode(tokens):
    tokens += offset
    return norm(tokens)


tokens = proj(torch.randn(2, 8))
loss = decode(tokens).pow(2).sum() + decode(tokens).pow(2).sum()
loss.backward()  # raises
