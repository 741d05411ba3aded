# expect: nonscalar_backward
# shape: the scores of positive and negative pairs come back as one (2, batch) tensor, unpacked into its two rows; the margin between them keeps one value per pair, and backward cannot start from it
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
    loss = torch.relu(1.0 - positive + negative)
    loss.backward()  # raises


if __name__ == "__main__":
    main()
