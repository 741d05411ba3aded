# expect: clean
# shape: a model class picked by name from the configuration (so the analysis cannot see it) splits the edges with a method of its own: that method's result is data, not the model's graph
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
config = {"arch": "SignedNet", "nodes": 50, "hidden": 16, "epochs": 3}


class SignedNet(nn.Module):
    def __init__(self, nodes, hidden):
        super().__init__()
        self.embed = nn.Parameter(torch.randn(nodes, hidden) * 0.1)
        self.score = nn.Linear(2 * hidden, 1)

    def split_edges(self, edge_index, test_ratio=0.2):
        perm = torch.randperm(edge_index.size(1))
        cut = int(test_ratio * edge_index.size(1))
        return edge_index[:, perm[cut:]], edge_index[:, perm[:cut]]

    def forward(self, edges):
        pairs = torch.cat([self.embed[edges[0]], self.embed[edges[1]]], dim=1)
        return self.score(pairs).squeeze(1)


model_cls = getattr(sys.modules[__name__], config["arch"])
model = model_cls(config["nodes"], config["hidden"])
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
pos = torch.randint(0, config["nodes"], (2, 200))
train_pos, test_pos = model.split_edges(pos)
for epoch in range(config["epochs"]):
    optimizer.zero_grad()
    loss = torch.nn.functional.softplus(-model(train_pos)).mean()
    loss.backward()
    optimizer.step()
