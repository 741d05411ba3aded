# expect: clean
# shape: the twin of lstm_state_kept_on_the_encoder_between_chunks_crash.py whose carry detaches the state: truncated backpropagation stops at the chunk boundary
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
        return tuple(s.detach() for s in state)

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
    loss.backward()
    opt.step()
