# expect: clean
# shape: a prompt-tuning model holds its prompt as a Parameter attribute; `model.requires_grad_(False)` freezes it with the layers, so the scores computed from it convert to numpy
import torch
from torch import nn


class PromptModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.prompt = nn.Parameter(torch.randn(4, 8))
        self.proj = nn.Linear(8, 2)

    def forward(self, x):
        return self.proj(torch.cat([self.prompt, x]))


def main():
    model = PromptModel()
    model.requires_grad_(False)
    scores = model(torch.randn(3, 8))
    print(scores.numpy().shape)


if __name__ == "__main__":
    main()
