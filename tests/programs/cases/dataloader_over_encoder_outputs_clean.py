# expect: clean
# shape: encoder outputs are detached before they become a TensorDataset: each DataLoader batch has no graph of the encoder
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class DensityModel(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 1))

    def fit(self, x_train, epochs=2, batch_size=32):
        loader = DataLoader(TensorDataset(x_train), batch_size=batch_size, shuffle=True)
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        for epoch in range(epochs):
            for (batch,) in loader:
                opt.zero_grad()
                loss = self.net(batch).pow(2).mean()
                loss.backward()
                opt.step()


torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 6))
data = torch.randn(100, 20)
latent = encoder(data).detach()
DensityModel(6).fit(latent)
