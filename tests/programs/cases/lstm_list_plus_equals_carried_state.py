# expect: freed_graph
# shape: the same `new_hidden += [h]` unroll, but the LSTM state is carried across updates without detach
import torch
import torch.nn as nn

torch.manual_seed(0)
lstm = nn.LSTM(4, 8)
head = nn.Linear(8, 1)
opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
state = (torch.zeros(1, 1, 8), torch.zeros(1, 1, 8))
for update in range(3):
    hidden_seq = torch.randn(5, 1, 4)
    new_hidden = []
    for h in hidden_seq:
        h, state = lstm(h.unsqueeze(0), state)
        new_hidden += [h]
    new_hidden = torch.flatten(torch.cat(new_hidden), 0, 1)
    loss = head(new_hidden).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
