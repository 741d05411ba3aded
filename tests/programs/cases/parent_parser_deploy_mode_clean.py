# expect: clean
# shape: meta-training runs the plain ProtoNet forward (the parent parser's default is "vanilla")
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args_parser():
    parser = argparse.ArgumentParser("protonet", add_help=False)
    parser.add_argument("--deploy", default="vanilla", choices=["vanilla", "finetune"])
    parser.add_argument("--lr", type=float, default=1e-3)
    return parser


class ProtoNet(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, support, labels, query, n_way):
        s, q = self.backbone(support), self.backbone(query)
        prototypes = torch.stack([s[labels == k].mean(0) for k in range(n_way)])
        return -torch.cdist(q, prototypes)


def main():
    parser = argparse.ArgumentParser("train", parents=[get_args_parser()])
    args = parser.parse_args([])
    torch.manual_seed(0)
    model = ProtoNet(nn.Sequential(nn.Linear(10, 16), nn.ReLU()))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    support, labels = torch.randn(10, 10), torch.arange(5).repeat(2)
    query, targets = torch.randn(5, 10), torch.arange(5)
    for episode in range(2):
        if args.deploy == "finetune":
            with torch.no_grad():
                logits = model(support, labels, query, 5)
        else:
            logits = model(support, labels, query, 5)
        loss = F.cross_entropy(logits, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


main()
