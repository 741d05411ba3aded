"""A character-level RNN trained with truncated backpropagation through time -- with a bug.

The hidden state returned by one step is fed into the next without `.detach()`, so the
second iteration's `loss.backward()` walks back into the first iteration's graph, which the
first `backward()` already freed:

    RuntimeError: Trying to backward through the graph a second time ...

`gradguard check examples/` reports it before the script runs.  The fix:
`output, hidden = rnn(inputs, hidden.detach())`.
"""
import torch
from torch import nn

torch.manual_seed(0)
rnn = nn.RNN(input_size=8, hidden_size=16, batch_first=True)
head = nn.Linear(16, 8)
optimizer = torch.optim.SGD([*rnn.parameters(), *head.parameters()], lr=0.1)
loss_fn = nn.CrossEntropyLoss()

hidden = torch.zeros(1, 4, 16)
for step in range(3):
    inputs = torch.randn(4, 10, 8)
    targets = torch.randint(0, 8, (4, 10))
    output, hidden = rnn(inputs, hidden)  # hidden keeps the previous step's graph alive
    loss = loss_fn(head(output).reshape(-1, 8), targets.reshape(-1))
    optimizer.zero_grad()
    loss.backward()  # step 1 fails here: the graph of step 0 was freed by its backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.3f}")
