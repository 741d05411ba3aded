# expect: clean
# source: https://github.com/OpenNMT/OpenNMT-py/issues/2153
"""Joint NMT + sentence classification: a GRU encoder-decoder translation
model with an extra classification head on the encoder, trained with an
OpenNMT-style sharded loss computation (loss.py) on a synthetic
copy-and-reverse task."""
import torch
import torch.nn as nn


class Statistics(object):
    def __init__(self, loss=0, n_words=0, n_correct=0):
        self.loss, self.n_words, self.n_correct = loss, n_words, n_correct

    def update(self, stat):
        self.loss += stat.loss
        self.n_words += stat.n_words
        self.n_correct += stat.n_correct


def filter_shard_state(state, shard_size=None):
    for k, v in state.items():
        if shard_size is None:
            yield k, v

        if v is not None:
            v_split = []
            if isinstance(v, torch.Tensor):
                for v_chunk in torch.split(v, shard_size):
                    v_chunk = v_chunk.data.clone()
                    v_chunk.requires_grad = v.requires_grad
                    v_split.append(v_chunk)
            yield k, (v, v_split)


def shards(state, shard_size):
    """Yields chunks of the shard state; once they are all consumed, the
    gradients collected on the chunks are backpropagated into the graph."""
    non_none = dict(filter_shard_state(state, shard_size))
    keys, values = zip(*((k, [v_chunk for v_chunk in v_split])
                         for k, (_, v_split) in non_none.items()))
    for shard_tensors in zip(*values):
        yield dict(zip(keys, shard_tensors))

    variables = []
    for k, (v, v_split) in non_none.items():
        if isinstance(v, torch.Tensor) and state[k].requires_grad:
            variables.extend(zip(torch.split(state[k], shard_size),
                                 [v_chunk.grad for v_chunk in v_split]))
    inputs, grads = zip(*variables)
    torch.autograd.backward(inputs, grads)


class NMTLossCompute(nn.Module):
    def __init__(self, generator, padding_idx, class_criterion):
        super(NMTLossCompute, self).__init__()
        self.generator = generator
        self.criterion = nn.NLLLoss(ignore_index=padding_idx, reduction='sum')
        self.class_criterion = class_criterion
        self.padding_idx = padding_idx

    def _compute_loss(self, output, target):
        scores = self.generator(output.view(-1, output.size(2)))
        gtruth = target.contiguous().view(-1)
        loss = self.criterion(scores, gtruth)
        non_padding = gtruth.ne(self.padding_idx)
        n_correct = scores.max(1)[1].eq(gtruth).masked_select(non_padding).sum().item()
        return loss, Statistics(loss.item(), non_padding.sum().item(), n_correct)

    def __call__(self, batch, output, stargets_logits, normalization=1.0, shard_size=0):
        batch_stats = Statistics()
        # joint learning: classification head on top of the encoder
        class_loss = self.class_criterion(stargets_logits, batch["class_refs"])
        class_loss.backward(retain_graph=True)
        batch_stats.update(Statistics(class_loss.item(), 0, 0))

        shard_state = {"output": output, "target": batch["tgt"][1:]}
        for shard in shards(shard_state, shard_size):
            loss, stats = self._compute_loss(**shard)
            loss.div(float(normalization)).backward()
            batch_stats.update(stats)
        return None, batch_stats


import torch
import torch.nn as nn


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
    _, stats = loss_compute(batch, output, stargets_logits,
                            normalization=normalization, shard_size=2)
    optim.step()
    print("step %d  nll/word %.3f  acc %.3f" % (step, stats.loss / max(stats.n_words, 1),
                                                stats.n_correct / max(stats.n_words, 1)))
