# expect: clean
# source: https://github.com/prescient-design/lobster/pull/127
"""Training a property-regression head on protein-LM latents.

A small FlexBERT-style masked language model exposes `tokens_to_latents`
(token ids -> per-residue hidden states); a linear head is trained on the
per-residue latents (predictions averaged over residues) to predict a scalar property of each sequence.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, HIDDEN, LENGTH = 25, 32, 16


class FlexBert(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, nhead=4, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.decoder = nn.Linear(HIDDEN, VOCAB)

    def forward(self, input_ids, attention_mask):
        h = self.embed(input_ids)
        return self.encoder(h, src_key_padding_mask=attention_mask == 0)

    def tokens_to_latents(self, input_ids, attention_mask):
        hidden_states = self(input_ids, attention_mask)
        return hidden_states


encoder = FlexBert().eval()
head = nn.Linear(HIDDEN, 1)
opt = torch.optim.Adam(head.parameters(), lr=1e-2)

input_ids = torch.randint(0, VOCAB, (64, LENGTH))
attention_mask = torch.ones(64, LENGTH, dtype=torch.long)
targets = torch.randn(64, 1)

for step in range(20):
    idx = torch.randint(0, 64, (16,))
    latents = encoder.tokens_to_latents(input_ids[idx], attention_mask[idx])
    pred = head(latents).mean(dim=1)
    loss = nn.functional.mse_loss(pred, targets[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final loss", loss.item())
