# expect: freed_graph
# shape: an RNN module keeps its hidden state on self between forward calls
import torch
import torch.nn as nn


class CharRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(5, 7, batch_first=True)
        self.head = nn.Linear(7, 5)
        self.hidden = torch.zeros(1, 2, 7)

    def forward(self, x):
        out, self.hidden = self.rnn(x, self.hidden)
        return self.head(out)


model = CharRNN()
opt = torch.optim.Adam(model.parameters())
for step in range(3):
    logits = model(torch.randn(2, 4, 5))
    loss = logits.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
