# expect: clean
# shape: the twin of embedding_loaded_unless_a_default_flag_freezes_it_crash.py whose flag is `store_false` (`--train-embed`, default True): the embedding is frozen by default, so copying the vectors into it is allowed
import argparse

import torch
import torch.nn as nn


def parse_args(argv):
    p = argparse.ArgumentParser(description="sentence encoder")
    p.add_argument("--vocab", type=int, default=50)
    p.add_argument("--dim", type=int, default=8)
    group = p.add_argument_group("embedding")
    group.add_argument("--train-embed", dest="freeze_embed", action="store_false")
    group.add_argument("--init", default="random", choices=["random", "glove"])
    return p.parse_args(argv)


class Encoder(nn.Module):
    def __init__(self, vocab, dim, freeze, vectors=None):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        if freeze:
            self.emb.weight.requires_grad = False
        if vectors is not None:
            self.emb.weight.copy_(vectors)
        self.proj = nn.Linear(dim, dim)

    def forward(self, tokens):
        return self.proj(self.emb(tokens).mean(1))


args = parse_args([])
vectors = torch.randn(args.vocab, args.dim) if args.init == "random" else None
model = Encoder(args.vocab, args.dim, args.freeze_embed, vectors)
loss = model(torch.randint(0, args.vocab, (4, 6))).pow(2).mean()
loss.backward()
