# expect: clean
# source: https://github.com/allenai/allennlp/issues/2239
"""LSTM sentence classifier (embedding -> LSTM -> linear) whose LSTM and
projection weights are initialised through an AllenNLP-style
InitializerApplicator with the uniform_unit_scaling initialiser, then trained
on synthetic token sequences labelled by which half of the vocabulary they use
most."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from initializers import InitializerApplicator, uniform_unit_scaling

torch.manual_seed(0)
VOCAB, EMB, HID = 50, 16, 32


class LstmClassifier(nn.Module):
    def __init__(self, initializer: InitializerApplicator = InitializerApplicator()):
        super().__init__()
        self.embedder = nn.Embedding(VOCAB, EMB)
        self.encoder = nn.LSTM(EMB, HID, batch_first=True)
        self.projection = nn.Linear(HID, 2)
        initializer(self)

    def forward(self, tokens):
        _, (h, _) = self.encoder(self.embedder(tokens))
        return self.projection(h[-1])


def make_batch(batch_size=16, seq_len=12):
    tokens = torch.randint(0, VOCAB, (batch_size, seq_len))
    labels = ((tokens < VOCAB // 2).float().mean(1) > 0.5).long()
    return tokens, labels


applicator = InitializerApplicator([
    ("encoder.*weight", uniform_unit_scaling),
    ("projection.weight", uniform_unit_scaling),
])
model = LstmClassifier(initializer=applicator)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for step in range(5):
    tokens, labels = make_batch()
    loss = F.cross_entropy(model(tokens), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
