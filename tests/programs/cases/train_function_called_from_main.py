# expect: freed_graph
# shape: the training loop lives in a function called from main(); the bug is a pre-loop forward pass
import torch
import torch.nn as nn


def train(model, data, opt):
    features = torch.relu(model(data))
    for epoch in range(3):
        loss = features.pow(2).mean() * epoch
        opt.zero_grad()
        loss.backward()  # raises
        opt.step()


def main():
    model = nn.Linear(4, 4)
    train(model, torch.randn(8, 4), torch.optim.SGD(model.parameters(), lr=0.1))


if __name__ == "__main__":
    main()
