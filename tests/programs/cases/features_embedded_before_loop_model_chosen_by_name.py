# expect: freed_graph
# shape: a model class picked by name from the configuration is trained on node features embedded once before the loop: the embedding's graph is freed by the first backward
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
config = {"arch": "EdgeScorer", "nodes": 50, "hidden": 16, "epochs": 3}


class EdgeScorer(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.score = nn.Linear(2 * hidden, 1)

    def forward(self, feats, edges):
        pairs = torch.cat([feats[edges[0]], feats[edges[1]]], dim=1)
        return self.score(pairs).squeeze(1)


embed = nn.Embedding(config["nodes"], config["hidden"])
model_cls = getattr(sys.modules[__name__], config["arch"])
model = model_cls(config["hidden"])
optimizer = torch.optim.Adam(list(model.parameters()) + list(embed.parameters()), lr=0.01)
feats = embed(torch.arange(config["nodes"]))
edges = torch.randint(0, config["nodes"], (2, 200))
for epoch in range(config["epochs"]):
    optimizer.zero_grad()
    loss = torch.nn.functional.softplus(-model(feats, edges)).mean()
    loss.backward()  # raises
    optimizer.step()
