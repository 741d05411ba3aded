# expect: numpy_requires_grad
# source: https://github.com/fastai/course-nlp/issues/47
import collections

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)

texts = [
    "a great movie with a great cast",
    "the plot was thin but the cast was great",
    "linklater made a slow movie",
    "a 30-something drama with a thin plot",
    "the movie was slow and the plot was thin",
    "great cast great plot great movie",
]


class Vocab:
    def __init__(self, itos):
        self.itos = itos
        self.stoi = collections.defaultdict(int, {w: i for i, w in enumerate(itos)})


def build_vocab(texts, min_freq=2, specials=("xxunk", "xxpad", "xxbos")):
    counts = collections.Counter(w for t in texts for w in t.split())
    kept = sorted(w for w, c in counts.items() if c >= min_freq)
    return Vocab(list(specials) + kept)


class LanguageModel(nn.Module):
    def __init__(self, vocab_sz, emb_sz=16, n_hid=32, pad_idx=1):
        super().__init__()
        self.encoder = nn.Embedding(vocab_sz, emb_sz, padding_idx=pad_idx)
        self.rnn = nn.LSTM(emb_sz, n_hid, batch_first=True)
        self.decoder = nn.Linear(n_hid, vocab_sz)

    def forward(self, x):
        out, _ = self.rnn(self.encoder(x))
        return self.decoder(out)


vocab = build_vocab(texts)
ids = [[2] + [vocab.stoi[w] for w in t.split()] for t in texts]
max_len = max(len(s) for s in ids)
batch = torch.tensor([s + [1] * (max_len - len(s)) for s in ids])

model = LanguageModel(len(vocab.itos))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(5):
    logits = model(batch[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1), ignore_index=1)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"epoch {epoch} loss {loss.item():.3f}")

enc = model.encoder
print(vocab.stoi["30-something"], vocab.stoi["linklater"])
same = np.allclose(enc.weight[vocab.stoi["30-something"], :],  # raises
                   enc.weight[vocab.stoi["linklater"], :])
print("rare words share the unk embedding:", same)
