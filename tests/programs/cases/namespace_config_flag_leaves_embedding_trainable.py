# expect: leaf_inplace
# shape: an argparse.Namespace config says freeze_embed=False, so the embedding keeps requires_grad; the pretrained vectors are then copied into its weight in place, outside no_grad
import argparse

import torch
import torch.nn as nn


class TextClassifier(nn.Module):
    def __init__(self, vocab_size, dim, num_classes, freeze, init_emb=None):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim)
        if freeze:
            self.emb.weight.requires_grad = False
        if init_emb is not None:
            self.emb.weight.copy_(init_emb)  # raises
        self.head = nn.Linear(dim, num_classes)

    def forward(self, tokens):
        return self.head(self.emb(tokens).mean(dim=1))


args = argparse.Namespace(vocab_size=50, dim=8, num_classes=3, freeze_embed=False, lr=0.05)
pretrained = torch.randn(args.vocab_size, args.dim)
model = TextClassifier(args.vocab_size, args.dim, args.num_classes, args.freeze_embed, init_emb=pretrained)
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=args.lr)
loss = model(torch.randint(0, args.vocab_size, (4, 6))).logsumexp(dim=1).mean()
loss.backward()
opt.step()
