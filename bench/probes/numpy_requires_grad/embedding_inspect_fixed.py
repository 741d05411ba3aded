# expect: clean
# source: https://github.com/tkalayci71/embedding-inspector/issues/22
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)

VOCAB = ["<pad>", "cat", "dog", "car", "tree", "house", "river", "sky"]
EMB_DIM = 48


class TinyTextEncoder(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, ids):
        return self.proj(self.token_embedding(ids)).mean(dim=1)


encoder = TinyTextEncoder(len(VOCAB), EMB_DIM)


def do_inspect(words):
    emb_vec = encoder.token_embedding.weight
    x = torch.arange(EMB_DIM)
    report = {}
    with torch.no_grad():
        for word in words:
            u = VOCAB.index(word)
            xs = x.numpy()
            ys = emb_vec[u].numpy()
            peak = int(xs[np.argmax(np.abs(ys))])
            report[word] = (float(np.linalg.norm(ys)), peak)
    return report


for word, (norm, peak) in do_inspect(["cat", "dog", "sky"]).items():
    print(f"{word:6s} norm={norm:.3f} strongest dim={peak}")

sims = torch.cosine_similarity(encoder.token_embedding.weight[1:2],
                               encoder.token_embedding.weight[2:], dim=1)
print("cat vs others:", [round(s, 3) for s in sims.tolist()])
