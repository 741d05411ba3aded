# expect: clean
# shape: a Dataset class stores raw inputs and runs nothing in its __init__; the encoder runs on each DataLoader batch, so each backward has a graph of its own
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class FeatureDataset(Dataset):
    def __init__(self, images, labels):
        self.images = images
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return {"x": self.images[idx], "y": self.labels[idx]}


torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(32, 16), nn.ReLU())
head = nn.Linear(16, 4)
data = FeatureDataset(torch.randn(40, 32), torch.randint(0, 4, (40,)))
loader = DataLoader(data, batch_size=8, shuffle=True)
opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.1)
for batch in loader:
    opt.zero_grad()
    loss = nn.functional.cross_entropy(head(encoder(batch["x"])), batch["y"])
    loss.backward()
    opt.step()
