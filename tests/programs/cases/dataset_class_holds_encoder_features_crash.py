# expect: freed_graph
# shape: a Dataset class stores features an encoder computed in its __init__ (with the encoder's graph) and returns rows of them from __getitem__; each DataLoader batch backpropagates into that one graph
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class FeatureDataset(Dataset):
    def __init__(self, encoder, images, labels):
        self.features = encoder(images)
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return {"x": self.features[idx], "y": self.labels[idx]}


torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(32, 16), nn.ReLU())
head = nn.Linear(16, 4)
data = FeatureDataset(encoder, torch.randn(40, 32), torch.randint(0, 4, (40,)))
loader = DataLoader(data, batch_size=8, shuffle=True)
opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.1)
for batch in loader:
    opt.zero_grad()
    loss = nn.functional.cross_entropy(head(batch["x"]), batch["y"])
    loss.backward()  # raises
    opt.step()
