# expect: clean
# shape: each batch of a DataLoader over a TensorDataset is normalised in place before the model saves it; the losses of all batches are summed and backpropagated once: every batch is a new tensor, so no saved batch was changed
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(4, 1)
loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
total = 0
for x, y in loader:
    x.sub_(x.mean(0))
    total = total + ((model(x) - y) ** 2).mean()
total.backward()
