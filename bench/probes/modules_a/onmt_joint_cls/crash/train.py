# expect: freed_graph
# source: https://github.com/OpenNMT/OpenNMT-py/issues/2153
"""Joint NMT + sentence classification: a GRU encoder-decoder translation
model with an extra classification head on the encoder, trained with an
OpenNMT-style sharded loss computation (loss.py) on a synthetic
copy-and-reverse task."""
import torch
import torch.nn as nn

from loss import NMTLossCompute

PAD, BOS = 0, 1
VOCAB, N_CLASSES, HID = 20, 3, 32


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, HID, padding_idx=PAD)
        self.rnn = nn.GRU(HID, HID)

    def forward(self, src):
        memory_bank, enc_state = self.rnn(self.embeddings(src))
        return enc_state, memory_bank


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, HID, padding_idx=PAD)
        self.rnn = nn.GRU(HID, HID)

    def forward(self, tgt, enc_state):
        dec_outs, _ = self.rnn(self.embeddings(tgt), enc_state)
        return dec_outs


class NMTModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = Encoder(), Decoder()
        self.classifier = nn.Linear(HID, N_CLASSES)

    def forward(self, src, tgt):
        enc_state, memory_bank = self.encoder(src)
        dec_out = self.decoder(tgt[:-1], enc_state)
        stargets_logits = self.classifier(enc_state[-1])
        return dec_out, stargets_logits


def make_batch(g, seq_len=7, batch_size=16):
    src = torch.randint(2, VOCAB, (seq_len, batch_size), generator=g)
    tgt = torch.cat([torch.full((1, batch_size), BOS), src.flip(0)], 0)
    class_refs = src[0] % N_CLASSES
    return {"src": src, "tgt": tgt, "class_refs": class_refs}


torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
model = NMTModel()
generator = nn.Sequential(nn.Linear(HID, VOCAB), nn.LogSoftmax(dim=-1))
loss_compute = NMTLossCompute(generator, PAD, nn.CrossEntropyLoss())
optim = torch.optim.Adam(list(model.parameters()) + list(generator.parameters()), lr=1e-3)

for step in range(3):
    batch = make_batch(g)
    optim.zero_grad()
    output, stargets_logits = model(batch["src"], batch["tgt"])
    normalization = batch["tgt"][1:].ne(PAD).sum().item()
    _, stats = loss_compute(batch, output, stargets_logits,  # raises
                            normalization=normalization, shard_size=2)
    optim.step()
    print("step %d  nll/word %.3f  acc %.3f" % (step, stats.loss / max(stats.n_words, 1),
                                                stats.n_correct / max(stats.n_words, 1)))
