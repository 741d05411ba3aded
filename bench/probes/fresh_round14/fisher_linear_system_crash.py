# expect: grad_unused
# source: https://github.com/tfjgeorge/nngeometry/issues/59
"""Forum-style question: fit a single Linear layer so that A @ model(A) = b,
then build the (empirical) Fisher information matrix of the trained setup
from per-output gradients, as a dense matrix."""
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)
model = nn.Linear(9, 3, bias=False)

# Define the training data
A = nn.Parameter(torch.tensor([[1., 2., 3.],
                               [4., 5., 6.],
                               [7., 8., 9.]]))
b = nn.Parameter(torch.tensor([[52.], [124.], [196.]]))

optimizer = optim.Adam(model.parameters(), lr=0.01)
loss_fn = nn.MSELoss()

# Train the model
for epoch in range(200):
    optimizer.zero_grad()
    y_pred = model(A.view(9))
    loss = loss_fn(A @ y_pred.view(3, 1), b)
    loss.backward()
    optimizer.step()
print("final loss", loss.item())

# Fisher information matrix of the outputs w.r.t. everything that is trainable
params = [*model.parameters(), A, b]
y_pred = model(A.view(9))
rows = []
for i in range(y_pred.numel()):
    grads = torch.autograd.grad(y_pred[i], params, retain_graph=True)  # raises
    rows.append(torch.cat([g.reshape(-1) for g in grads]))
J = torch.stack(rows)
FIM = J.T @ J / J.shape[0]
print("FIM shape", tuple(FIM.shape), "trace", FIM.trace().item())
