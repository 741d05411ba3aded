# expect: inference_tensor
# shape: a test step sums the batch losses of a DataLoader over a TensorDataset inside torch.inference_mode(), so the running total becomes an inference tensor; averaging it with /= after the block is an in-place update outside inference mode
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
loss_fn = nn.CrossEntropyLoss()
test_loader = DataLoader(TensorDataset(torch.randn(40, 6), torch.randint(0, 3, (40,))), batch_size=8)


def test_step(model, loader):
    test_loss = 0
    model.eval()
    with torch.inference_mode():
        for X, y in loader:
            test_loss += loss_fn(model(X), y)
    test_loss /= len(loader)  # raises
    return test_loss.item()


print(test_step(model, test_loader))
