# expect: clean
# shape: `torch.backends...= True` inside a function, then weights edited inside `with torch.no_grad():`
import torch
import torch.nn as nn


def main():
    torch.backends.cudnn.benchmark = True
    lin = nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.zero_()
        lin.weight[:, :2].copy_(torch.ones(4, 2))
    loss = lin(torch.randn(2, 4)).sum()
    loss.backward()


main()
