# expect: clean
# shape: the twin of token_scores_attention_unreduced_crash.py that reduces the per-token loss with `.mean()` before backward
import torch
import torch.nn as nn
import torch.nn.functional as F


class TokenScorer(nn.Module):
    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, ids):
        h = self.embed(ids)
        q, k, v = self.qkv(h).split(h.shape[-1], dim=-1)
        att = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)).squeeze(1)
        return self.out(att.transpose(0, 1).transpose(0, 1)).squeeze(-1)


model = TokenScorer()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ids = torch.randint(0, 50, (4, 10))
labels = torch.randint(0, 2, (4, 10)).float()
loss = F.binary_cross_entropy_with_logits(model(ids), labels, reduction="none")
loss.mean().backward()
opt.step()
