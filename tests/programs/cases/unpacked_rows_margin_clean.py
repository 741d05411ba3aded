# expect: clean
# shape: the same two rows, the margin averaged over the pairs before the backward
import torch
from torch import nn


class PairScorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 1)

    def forward(self, pos, neg):
        both = torch.stack([pos, neg])
        return self.proj(both).squeeze(-1)


def main():
    torch.manual_seed(0)
    scorer = PairScorer()
    scores = scorer(torch.randn(4, 6), torch.randn(4, 6))
    positive, negative = scores
    loss = torch.relu(1.0 - positive + negative).mean()
    loss.backward()


if __name__ == "__main__":
    main()
