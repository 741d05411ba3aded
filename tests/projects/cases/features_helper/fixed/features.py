import torch


@torch.no_grad()
def embed(encoder, x):
    """Features of a whole dataset, computed once (the encoder is frozen)."""
    return torch.relu(encoder(x))
