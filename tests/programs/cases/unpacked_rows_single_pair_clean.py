# expect: clean
# shape: the scores of one positive and one negative pair come back as a (2, 1) tensor, unpacked into its two rows of one element each; their margin has one element, and backward needs no gradient argument
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
    scores = scorer(torch.randn(1, 6), torch.randn(1, 6))
    positive, negative = scores
    loss = torch.relu(1.0 - positive + negative)
    loss.backward()


if __name__ == "__main__":
    main()
