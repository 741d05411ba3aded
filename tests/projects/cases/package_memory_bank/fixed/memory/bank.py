import torch


class MemoryBank:
    """The last `size` embeddings, as negatives for a contrastive loss."""

    def __init__(self, dim, size=32):
        self.size = size
        self.bank = torch.randn(size, dim)

    def negatives(self, queries):
        return queries @ self.bank.t()

    def push(self, keys):
        self.bank = torch.cat([keys.detach(), self.bank])[: self.size]
