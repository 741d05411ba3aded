# expect: no_grad_fn
# shape: a forecaster's batch step turns the model's outputs back into a float tensor with torch.tensor (a copy of the values, without the graph) before the loss
import torch
import torch.nn as nn


class Forecaster:
    def __init__(self, dims=4, horizon=3):
        self.model = nn.Sequential(nn.Linear(dims * 8, 32), nn.ReLU(), nn.Linear(32, dims * horizon))
        self.horizon, self.dims = horizon, dims
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.criterion = nn.MSELoss()

    def process_batch(self, x, y):
        outputs = self.model(x.flatten(1)).view(-1, self.horizon, self.dims)
        outputs = torch.tensor(outputs, dtype=torch.float32)
        return outputs, torch.as_tensor(y, dtype=torch.float32)

    def train_step(self, x, y):
        self.opt.zero_grad()
        pred, true = self.process_batch(x, y)
        loss = self.criterion(pred, true)
        loss.backward()  # raises
        self.opt.step()
        return loss.item()


f = Forecaster()
for _ in range(2):
    print(f.train_step(torch.randn(5, 8, 4), torch.randn(5, 3, 4).double()))
