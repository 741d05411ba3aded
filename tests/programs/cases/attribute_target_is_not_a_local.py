# expect: leaf_inplace
# shape: `torch.backends...= True` inside a function does not make `torch` a local: the no_grad block still counts
import torch
import torch.nn as nn


def main():
    torch.backends.cudnn.benchmark = True
    lin = nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.zero_()
    lin.weight.add_(1)  # raises


main()
