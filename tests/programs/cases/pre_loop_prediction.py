# expect: freed_graph
# shape: predictions computed once before the epoch loop, the loss rebuilt from them every epoch
import torch
import torch.nn as nn

X = torch.randn(16, 3)
y = torch.randn(16, 1)
model = nn.Linear(3, 1)
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
y_pred = model(X)
for epoch in range(5):
    loss = criterion(y_pred, y)
    optimizer.zero_grad()
    loss.backward()  # raises
