# expect: freed_graph
# shape: overfit-one-batch, but the encoder's feature of the batch is also computed once before the loop
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
xb, yb = next(iter(loader))
encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
head = nn.Linear(8, 1)
opt = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=1e-2)
feat = encoder(xb)
for step in range(5):
    loss = nn.functional.mse_loss(head(feat), yb)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
