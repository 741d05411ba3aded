import torch


class CharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @property
    def n_words(self):
        return len(self.chars)

    def encode(self, s):
        return [self.stoi[c] for c in s]


def next_token_batches(ids, seq_len, batch_size, n_batches, seed=0):
    """Random windows of `seq_len` tokens; the target is the token that follows."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor(ids)
    for _ in range(n_batches):
        starts = torch.randint(0, len(ids) - seq_len - 1, (batch_size,), generator=g)
        x = torch.stack([ids[s:s + seq_len] for s in starts])
        y = torch.stack([ids[s + seq_len] for s in starts])
        yield x, y
