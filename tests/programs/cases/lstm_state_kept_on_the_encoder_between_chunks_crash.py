# expect: freed_graph
# shape: a streaming encoder keeps its LSTM's `(h, c)` on itself (`self._state = self._carry(state)`) so the next chunk continues the utterance; each chunk's backward frees the graph the next chunk's state still carries
import torch
import torch.nn as nn


class StreamingEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.frontend = nn.Linear(8, 16)
        self.rnn = nn.LSTM(16, 16, batch_first=True)
        self.proj = nn.Linear(16, 5)
        self._state = None

    def _carry(self, state):
        return state

    def forward(self, feats):
        out, state = self.rnn(self.frontend(feats), self._state)
        self._state = self._carry(state)
        return self.proj(out)


model = StreamingEncoder()
opt = torch.optim.Adam(model.parameters())
utterance = torch.randn(2, 12, 8)
for chunk in utterance.split(4, dim=1):
    loss = model(chunk).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
