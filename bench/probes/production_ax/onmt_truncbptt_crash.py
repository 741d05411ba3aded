# expect: freed_graph
# source: https://github.com/OpenNMT/OpenNMT-py/issues/403
"""OpenNMT-py (0.x layout) RNN encoder-decoder NMT trainer on a synthetic reverse task: RNN
encoder, input-feeding attention decoder with a DecoderState, NMTLossCompute, Optim with lr
decay, Statistics, and a Trainer with truncated-decoder training and validation."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


def model_opts(parser):
    parser.add_argument('-word_vec_size', type=int, default=16)
    parser.add_argument('-rnn_size', type=int, default=32)
    parser.add_argument('-layers', type=int, default=1)
    parser.add_argument('-dropout', type=float, default=0.1)
    parser.add_argument('-input_feed', type=int, default=1)


def train_opts(parser):
    parser.add_argument('-batch_size', type=int, default=8)
    parser.add_argument('-epochs', type=int, default=2)
    parser.add_argument('-optim', default='sgd', choices=['sgd', 'adam'])
    parser.add_argument('-learning_rate', type=float, default=1.0)
    parser.add_argument('-max_grad_norm', type=float, default=5)
    parser.add_argument('-learning_rate_decay', type=float, default=0.5)
    parser.add_argument('-start_decay_at', type=int, default=2)
    parser.add_argument('-truncated_decoder', type=int, default=4)
    parser.add_argument('-seed', type=int, default=3435)


class Embeddings(nn.Module):
    def __init__(self, word_vec_size, vocab_size, dropout):
        super().__init__()
        self.make_embedding = nn.Embedding(vocab_size, word_vec_size, padding_idx=PAD)
        self.dropout, self.embedding_size = nn.Dropout(dropout), word_vec_size

    def forward(self, source):
        return self.dropout(self.make_embedding(source))


class RNNEncoder(nn.Module):
    def __init__(self, num_layers, hidden_size, dropout, embeddings):
        super().__init__()
        self.embeddings = embeddings
        self.rnn = nn.LSTM(embeddings.embedding_size, hidden_size, num_layers, dropout=0.0)

    def forward(self, src, lengths=None):
        emb = self.embeddings(src)
        memory_bank, encoder_final = self.rnn(emb)
        return encoder_final, memory_bank


class GlobalAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.linear_in = nn.Linear(dim, dim, bias=False)
        self.linear_out = nn.Linear(dim * 2, dim, bias=False)

    def forward(self, source, memory_bank):
        align = torch.bmm(memory_bank, self.linear_in(source).unsqueeze(2)).squeeze(2)
        align_vectors = F.softmax(align, dim=-1)
        c = torch.bmm(align_vectors.unsqueeze(1), memory_bank).squeeze(1)
        attn_h = torch.tanh(self.linear_out(torch.cat([c, source], 1)))
        return attn_h, align_vectors


class DecoderState(object):
    """Interface for grouping together the current state of a recurrent decoder."""

    def detach(self):
        for h in self._all:
            if h is not None:
                h = h.detach()


class RNNDecoderState(DecoderState):
    def __init__(self, hidden_size, rnnstate):
        self.hidden = rnnstate if isinstance(rnnstate, tuple) else (rnnstate,)
        self.coverage, batch_size = None, self.hidden[0].size(1)
        self.input_feed = self.hidden[0].new_zeros(batch_size, hidden_size).unsqueeze(0)

    @property
    def _all(self):
        return self.hidden + (self.input_feed,)

    def update_state(self, rnnstate, input_feed, coverage):
        self.hidden = rnnstate if isinstance(rnnstate, tuple) else (rnnstate,)
        self.input_feed, self.coverage = input_feed, coverage


class InputFeedRNNDecoder(nn.Module):
    def __init__(self, num_layers, hidden_size, dropout, embeddings):
        super().__init__()
        self.hidden_size, self.embeddings = hidden_size, embeddings
        self.rnn = nn.LSTMCell(embeddings.embedding_size + hidden_size, hidden_size)
        self.attn = GlobalAttention(hidden_size)
        self.dropout = nn.Dropout(dropout)

    def init_decoder_state(self, src, memory_bank, encoder_final):
        return RNNDecoderState(self.hidden_size, encoder_final)

    def forward(self, tgt, memory_bank, state):
        input_feed, hidden = state.input_feed.squeeze(0), (state.hidden[0][-1], state.hidden[1][-1])
        outputs, attns = [], []
        emb, bank = self.embeddings(tgt), memory_bank.transpose(0, 1)
        for emb_t in emb.split(1):
            decoder_input = torch.cat([emb_t.squeeze(0), input_feed], 1)
            hidden = self.rnn(decoder_input, hidden)
            decoder_output, p_attn = self.attn(hidden[0], bank)
            decoder_output = self.dropout(decoder_output)
            input_feed = decoder_output
            outputs.append(decoder_output)
            attns.append(p_attn)
        state.update_state((hidden[0].unsqueeze(0), hidden[1].unsqueeze(0)), input_feed.unsqueeze(0), None)
        return torch.stack(outputs), state, {"std": torch.stack(attns)}


class NMTModel(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, src, tgt, lengths, dec_state=None):
        tgt = tgt[:-1]  # exclude last target from inputs
        enc_final, memory_bank = self.encoder(src, lengths)
        enc_state = self.decoder.init_decoder_state(src, memory_bank, enc_final)
        decoder_outputs, dec_state, attns = self.decoder(
            tgt, memory_bank, enc_state if dec_state is None else dec_state)
        return decoder_outputs, attns, dec_state


class Statistics(object):
    def __init__(self, loss=0, n_words=0, n_correct=0):
        self.loss, self.n_words, self.n_correct = loss, n_words, n_correct
        self.start_time = time.time()

    def update(self, stat):
        self.loss, self.n_words, self.n_correct = (self.loss + stat.loss, self.n_words + stat.n_words,
                                                   self.n_correct + stat.n_correct)

    def accuracy(self):
        return 100 * (self.n_correct / max(1, self.n_words))

    def ppl(self):
        return math.exp(min(self.loss / max(1, self.n_words), 100))


class NMTLossCompute(nn.Module):
    def __init__(self, generator, vocab_size):
        super().__init__()
        self.generator = generator
        self.criterion = nn.NLLLoss(ignore_index=PAD, reduction='sum')

    def _stats(self, loss, scores, target):
        pred, non_padding = scores.max(1)[1], target.ne(PAD)
        num_correct = pred.eq(target).masked_select(non_padding).sum().item()
        return Statistics(loss.item(), non_padding.sum().item(), num_correct)

    def _compute_loss(self, output, target):
        scores = self.generator(output.view(-1, output.size(2)))
        gtruth = target.reshape(-1)
        loss = self.criterion(scores, gtruth)
        return loss, self._stats(loss.detach(), scores.detach(), gtruth)

    def monolithic_compute_loss(self, batch, output, attns):
        return self._compute_loss(output, batch["tgt"][1:])[1]

    def sharded_compute_loss(self, batch, output, attns, cur_trunc, trunc_size, normalization):
        target = batch["tgt"][cur_trunc + 1: cur_trunc + trunc_size]
        loss, stats = self._compute_loss(output, target)
        loss.div(normalization).backward()  # raises
        return stats


class Optim(object):
    def __init__(self, method, lr, max_grad_norm, lr_decay=1, start_decay_at=None):
        self.last_ppl, self.lr, self.max_grad_norm, self.start_decay = None, lr, max_grad_norm, False
        self.method, self.lr_decay, self.start_decay_at = method, lr_decay, start_decay_at

    def set_parameters(self, params):
        self.params = [p for p in params if p.requires_grad]
        self.optimizer = (torch.optim.SGD(self.params, lr=self.lr) if self.method == 'sgd' else
                          torch.optim.Adam(self.params, lr=self.lr, betas=(0.9, 0.98), eps=1e-9))

    def step(self):
        if self.max_grad_norm:
            nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()

    def update_learning_rate(self, ppl, epoch):
        if self.start_decay_at is not None and epoch >= self.start_decay_at:
            self.start_decay = True
        if self.last_ppl is not None and ppl > self.last_ppl:
            self.start_decay = True
        if self.start_decay:
            self.lr = self.lr * self.lr_decay
        self.last_ppl = ppl
        self.optimizer.param_groups[0]['lr'] = self.lr


class Trainer(object):
    def __init__(self, model, train_loss, valid_loss, optim, trunc_size=0):
        self.model, self.train_loss, self.valid_loss = model, train_loss, valid_loss
        self.optim, self.trunc_size = optim, trunc_size
        self.model.train()

    def train(self, train_iter, epoch, report_func=None):
        total_stats, report_stats = Statistics(), Statistics()
        for i, batch in enumerate(train_iter):
            target_size = batch["tgt"].size(0)
            trunc_size = self.trunc_size if self.trunc_size else target_size
            dec_state, src, src_lengths, tgt_outer = None, batch["src"], batch["src_lengths"], batch["tgt"]
            normalization = batch["tgt"][1:].ne(PAD).sum().item()
            for j in range(0, target_size - 1, trunc_size):
                tgt = tgt_outer[j: j + trunc_size]
                self.model.zero_grad()
                outputs, attns, dec_state = self.model(src, tgt, src_lengths, dec_state)
                batch_stats = self.train_loss.sharded_compute_loss(batch, outputs, attns, j, trunc_size,
                                                                   normalization)
                self.optim.step()
                total_stats.update(batch_stats), report_stats.update(batch_stats)
                if dec_state is not None:
                    dec_state.detach()
            if report_func is not None:
                report_stats = report_func(epoch, i, len(train_iter), total_stats.start_time, self.optim.lr,
                                           report_stats)
        return total_stats

    def validate(self, valid_iter):
        self.model.eval()
        stats = Statistics()
        with torch.no_grad():
            for batch in valid_iter:
                outputs, attns, _ = self.model(batch["src"], batch["tgt"], batch["src_lengths"])
                stats.update(self.valid_loss.monolithic_compute_loss(batch, outputs, attns))
        self.model.train()
        return stats

    def epoch_step(self, ppl, epoch):
        return self.optim.update_learning_rate(ppl, epoch)


def make_batches(n, batch_size, vocab_size, src_len=6, generator=None):
    batches = []
    for _ in range(n):
        body = torch.randint(3, vocab_size, (src_len, batch_size), generator=generator)
        tgt = torch.cat([torch.full((1, batch_size), BOS), body.flip(0), torch.full((1, batch_size), EOS)])
        batches.append({"src": body, "tgt": tgt, "src_lengths": torch.full((batch_size,), src_len)})
    return batches


def report_func(epoch, batch, num_batches, start_time, lr, report_stats):
    if (batch + 1) % 5 == 0:
        print("Epoch %2d, %3d/%3d; acc: %6.2f; ppl: %6.2f; lr: %.4f" %
              (epoch, batch + 1, num_batches, report_stats.accuracy(), report_stats.ppl(), lr))
        report_stats = Statistics()
    return report_stats


def train_model(model, train_data, valid_data, optim, opt, vocab_size):
    trainer = Trainer(model, NMTLossCompute(model.generator, vocab_size), NMTLossCompute(model.generator, vocab_size),
                      optim, opt.truncated_decoder)
    for epoch in range(1, opt.epochs + 1):
        train_stats = trainer.train(train_data, epoch, report_func)
        print('Train perplexity: %g; accuracy: %g' % (train_stats.ppl(), train_stats.accuracy()))
        valid_stats = trainer.validate(valid_data)
        print('Validation perplexity: %g; accuracy: %g' % (valid_stats.ppl(), valid_stats.accuracy()))
        trainer.epoch_step(valid_stats.ppl(), epoch)


def main():
    parser = argparse.ArgumentParser(description='train.py')
    model_opts(parser)
    train_opts(parser)
    opt = parser.parse_args([])
    torch.manual_seed(opt.seed)
    vocab_size = 20
    src_emb, tgt_emb = (Embeddings(opt.word_vec_size, vocab_size, opt.dropout) for _ in range(2))
    model = NMTModel(RNNEncoder(opt.layers, opt.rnn_size, opt.dropout, src_emb),
                     InputFeedRNNDecoder(opt.layers, opt.rnn_size, opt.dropout, tgt_emb))
    model.generator = nn.Sequential(nn.Linear(opt.rnn_size, vocab_size), nn.LogSoftmax(dim=-1))
    for p in model.parameters():
        p.data.uniform_(-0.1, 0.1)
    optim = Optim(opt.optim, opt.learning_rate, opt.max_grad_norm, opt.learning_rate_decay, opt.start_decay_at)
    optim.set_parameters(model.parameters())
    g = torch.Generator().manual_seed(opt.seed)
    train_data = make_batches(10, opt.batch_size, vocab_size, generator=g)
    valid_data = make_batches(2, opt.batch_size, vocab_size, generator=g)
    train_model(model, train_data, valid_data, optim, opt, vocab_size)


if __name__ == '__main__':
    main()
