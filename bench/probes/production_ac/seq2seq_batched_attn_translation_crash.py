# expect: freed_graph
# source: https://github.com/spro/practical-pytorch/issues/27
"""Batched GRU encoder / attention decoder for toy sequence-to-sequence translation.

Adapted from the batched extension of the practical-pytorch seq2seq translation
tutorial: synthetic source/target token pairs are sorted by length, padded into
batches, encoded with a GRU and decoded one token at a time with attention over
encoder outputs stretched to MAX_LENGTH.  Teacher forcing, masked NLL loss, two
SGD optimizers and a small logging callback.
"""
import argparse
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

PAD_token, EOS_token, SOS_token = 0, 1, 2
MAX_LENGTH = 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="batched seq2seq translation")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden-size", type=int, default=32)
    p.add_argument("--vocab", type=int, default=12)
    p.add_argument("--pairs", type=int, default=64)
    p.add_argument("--iters", type=int, default=6)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--teacher-forcing-ratio", type=float, default=0.5)
    p.add_argument("--print-every", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class EncoderRNN(nn.Module):
    """Encoder for seq2seq: embedding followed by a (multi-layer) GRU."""

    def __init__(self, input_size, batch_size, hidden_size, n_layers=1):
        super().__init__()
        self.n_layers = n_layers
        self.batch_size = batch_size
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)

    def forward(self, input, hidden):
        # input is (batch_size, seq_len); the GRU wants (seq_len, batch, hidden)
        embedded = self.embedding(input).transpose(0, 1).contiguous()
        output = embedded
        for _ in range(self.n_layers):
            output, hidden = self.gru(output, hidden)
        return output, hidden

    def init_hidden(self):
        return torch.zeros(1, self.batch_size, self.hidden_size)


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, batch_size, dropout_p=0.1, max_length=MAX_LENGTH):
        super().__init__()
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.batch_size = batch_size
        self.max_length = max_length
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attn = nn.Linear(hidden_size * 2, max_length)
        self.attn_combine = nn.Linear(hidden_size * 2, hidden_size)
        self.dropout = nn.Dropout(dropout_p)
        self.gru = nn.GRU(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden, encoder_outputs):
        # input (batch, 1); hidden (1, batch, hidden); encoder_outputs (max_len, batch, hidden)
        embedded = self.dropout(self.embedding(input).view(1, self.batch_size, -1))
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(1), encoder_outputs.transpose(0, 1))
        output = torch.cat((embedded[0], attn_applied[:, 0]), 1)
        output = F.relu(self.attn_combine(output).unsqueeze(0))
        output, hidden = self.gru(output, hidden)
        output = F.log_softmax(self.out(output[0]), dim=1)
        return output, hidden, attn_weights


def fake_data(n_pairs, max_size_len=8, max_vocab=12):
    """Random (source, target) id sequences; 0 is pad, 1 eos, 2 sos."""
    src, tgt = [], []
    for _ in range(n_pairs):
        src.append([random.randint(3, max_vocab - 1) for _ in range(random.randint(1, max_size_len))])
        tgt.append([random.randint(3, max_vocab - 1) for _ in range(random.randint(1, max_size_len))])
    return sorted(zip(src, tgt), key=lambda p: len(p[0]))


def batchify(pairs_sorted, batch_size):
    """Yields padded source, target and target-mask LongTensors forever."""
    num_batches = len(pairs_sorted) // batch_size
    while True:
        for i in range(num_batches):
            chunk = pairs_sorted[i * batch_size:(i + 1) * batch_size]
            enc = [p[0] for p in chunk]
            enc_len = max(len(s) for s in enc)
            enc = [s + [PAD_token] * (enc_len - len(s)) + [EOS_token] for s in enc]
            dec = [p[1] for p in chunk]
            dec_len = max(len(s) for s in dec)
            dec = [s + [PAD_token] * (dec_len - len(s)) + [EOS_token] for s in dec]
            mask = [[0 if t == PAD_token else 1 for t in s] for s in dec]
            yield torch.LongTensor(enc), torch.LongTensor(dec), torch.LongTensor(mask)
        pairs_sorted = pairs_sorted[::-1]


def time_since(since):
    s = time.time() - since
    return "%dm %ds" % (math.floor(s / 60), s - math.floor(s / 60) * 60)


class LossLogger:
    def __init__(self, every):
        self.every = every
        self.total = 0.0
        self.history = []
        self.start = time.time()

    def on_step_end(self, step, loss):
        self.total += loss
        if step % self.every == 0:
            avg = self.total / self.every
            self.history.append(avg)
            self.total = 0.0
            print("%s (step %d) %.4f" % (time_since(self.start), step, avg))


class Seq2SeqTrainer:
    def __init__(self, args, encoder, decoder):
        self.args = args
        self.encoder = encoder
        self.decoder = decoder
        self.encoder_optimizer = optim.SGD(encoder.parameters(), lr=args.lr)
        self.decoder_optimizer = optim.SGD(decoder.parameters(), lr=args.lr)
        self.callbacks = [LossLogger(args.print_every)]

    def _stretch_encoder_outputs(self, encoder_outputs):
        # the attention layer has a fixed MAX_LENGTH input, so copy the
        # encoder states into a zero-padded (max_len, batch, hidden) buffer
        bs, hs = self.args.batch_size, self.args.hidden_size
        encoder_outputs_for_decoder = torch.zeros(MAX_LENGTH, bs, hs)
        for i in range(output_from_encoder.size(0)):
            encoder_outputs_for_decoder[i] = output_from_encoder[i]
        return encoder_outputs_for_decoder

    def train_step(self, encoder_sentences, decoder_sentences, decoder_mask):
        self.encoder_optimizer.zero_grad()
        self.decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = self.encoder(encoder_sentences, self.encoder.init_hidden())
        encoder_outputs_for_decoder = self._stretch_encoder_outputs(encoder_outputs)

        decoder_input = torch.LongTensor([SOS_token] * self.args.batch_size).view(-1, 1)
        decoder_hidden = encoder_hidden
        use_teacher_forcing = random.random() < self.args.teacher_forcing_ratio
        decoding_len = decoder_sentences.size(1)
        loss = 0
        for i in range(decoding_len):
            output, decoder_hidden, _ = self.decoder(decoder_input, decoder_hidden, encoder_outputs_for_decoder)
            target = decoder_sentences[:, i].contiguous().view(-1, 1)
            word_loss = output.gather(1, target) * decoder_mask[:, i].float().view(-1, 1)
            loss += -1 * word_loss.sum()
            if use_teacher_forcing:
                decoder_input = target
            else:
                decoder_input = output.detach().topk(1)[1]
        loss.backward()  # raises
        self.encoder_optimizer.step()
        self.decoder_optimizer.step()
        return loss.item() / decoding_len

    @torch.no_grad()
    def evaluate(self, batch):
        enc, dec, _ = batch
        outputs, hidden = self.encoder(enc, self.encoder.init_hidden())
        return outputs.shape, hidden.norm().item()

    def fit(self, batch_gen, n_iters):
        for step in range(1, n_iters + 1):
            en_sen, dec_sen, dec_mask = next(batch_gen)
            loss = self.train_step(en_sen, dec_sen, dec_mask)
            for cb in self.callbacks:
                cb.on_step_end(step, loss)
        return self.callbacks[0].history


def build(args):
    encoder = EncoderRNN(args.vocab, hidden_size=args.hidden_size, batch_size=args.batch_size)
    decoder = AttnDecoderRNN(args.hidden_size, args.vocab, args.batch_size, dropout_p=0.1)
    return Seq2SeqTrainer(args, encoder, decoder)


if __name__ == "__main__":
    args = parse_args([])
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    pairs_sorted = fake_data(args.pairs, max_vocab=args.vocab)
    batch_gen = batchify(pairs_sorted, args.batch_size)
    trainer = build(args)
    print(trainer.encoder)
    print(trainer.decoder)

    # shape check of the encoder on a first batch before training
    probe_src, _, _ = next(batchify(pairs_sorted, args.batch_size))
    output_from_encoder, hidden_from_encoder = trainer.encoder(probe_src, trainer.encoder.init_hidden())
    print("encoder output", tuple(output_from_encoder.shape), "hidden", tuple(hidden_from_encoder.shape))

    history = trainer.fit(batch_gen, args.iters)
    print("eval", trainer.evaluate(next(batch_gen)))
    print("loss history", history)
