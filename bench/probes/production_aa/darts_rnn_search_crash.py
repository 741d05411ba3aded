# expect: freed_graph
# source: https://github.com/quark0/darts/issues/56
"""DARTS-style recurrent cell search on a synthetic token stream.

A ported version of the differentiable architecture search RNN pipeline: a
search cell mixes candidate activations with softmax-weighted architecture
parameters (alphas), an Architect performs the first-order alpha update on a
held-out split, and the weights are trained with truncated BPTT.  Data is a
seeded random token corpus so the script runs on CPU in a few seconds.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

PRIMITIVES = ['none', 'tanh', 'relu', 'sigmoid', 'identity']
STEPS = 4


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='rnn cell search')
    parser.add_argument('--ntokens', type=int, default=50)
    parser.add_argument('--emsize', type=int, default=16)
    parser.add_argument('--nhid', type=int, default=16)
    parser.add_argument('--bptt', type=int, default=8)
    parser.add_argument('--batch_size', type=int, default=4)
    parser.add_argument('--lr', type=float, default=20.)
    parser.add_argument('--arch_lr', type=float, default=3e-3)
    parser.add_argument('--arch_weight_decay', type=float, default=1e-3)
    parser.add_argument('--clip', type=float, default=0.25)
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--seed', type=int, default=3)
    parser.add_argument('--unrolled', action='store_true', default=False)
    return parser.parse_args(argv)


def repackage_hidden(h):
    """Wraps hidden states in new Variables, to detach them from their history."""
    if type(h) == Variable:
        return Variable(h.data)
    elif isinstance(h, (list, tuple)):
        return tuple(repackage_hidden(v) for v in h)
    return h


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, args, seq_len=None):
    seq_len = min(seq_len if seq_len else args.bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len]
    return data, target


class DARTSCellSearch(nn.Module):
    def __init__(self, ninp, nhid):
        super().__init__()
        self.nhid = nhid
        self._W0 = nn.Parameter(torch.Tensor(ninp + nhid, 2 * nhid).uniform_(-0.04, 0.04))
        self._Ws = nn.ParameterList([
            nn.Parameter(torch.Tensor(nhid, 2 * nhid).uniform_(-0.04, 0.04)) for _ in range(STEPS)
        ])

    def _get_activation(self, name):
        return {'tanh': torch.tanh, 'relu': torch.relu, 'sigmoid': torch.sigmoid,
                'identity': lambda x: x}[name]

    def _compute_init_state(self, x, h_prev):
        xh = torch.cat([x, h_prev], dim=-1)
        c0, h0 = torch.split(xh.mm(self._W0), self.nhid, dim=-1)
        c0 = c0.sigmoid()
        h0 = h0.tanh()
        return h_prev + c0 * (h0 - h_prev)

    def cell(self, x, h_prev, probs):
        s0 = self._compute_init_state(x, h_prev)
        states = [s0]
        offset = 0
        for i in range(STEPS):
            s_prev = states[-1]
            c, h = torch.split(s_prev.mm(self._Ws[i]), self.nhid, dim=-1)
            c = c.sigmoid()
            mixed = 0
            for k, name in enumerate(PRIMITIVES):
                if name == 'none':
                    continue
                fn = self._get_activation(name)
                mixed = mixed + probs[offset + i, k] * (s_prev + c * (fn(h) - s_prev))
            states.append(mixed)
        return torch.mean(torch.stack(states[1:], -1), -1)

    def forward(self, inputs, hidden, probs):
        h = hidden[0][0]
        outputs = []
        for t in range(inputs.size(0)):
            h = self.cell(inputs[t], h, probs)
            outputs.append(h)
        return torch.stack(outputs), h.unsqueeze(0)


class RNNModelSearch(nn.Module):
    def __init__(self, ntoken, ninp, nhid):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = DARTSCellSearch(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid
        self._initialize_arch_parameters()

    def _initialize_arch_parameters(self):
        self.weights = Variable(1e-3 * torch.randn(STEPS, len(PRIMITIVES)), requires_grad=True)
        self._arch_parameters = [self.weights]

    def arch_parameters(self):
        return self._arch_parameters

    def init_hidden(self, bsz):
        weight = next(self.parameters()).data
        return [weight.new_zeros(1, bsz, self.nhid)]

    def forward(self, input, hidden):
        probs = F.softmax(self.weights, dim=-1)
        emb = self.encoder(input)
        output, new_h = self.rnn(emb, hidden, probs)
        logits = self.decoder(output)
        return F.log_softmax(logits, dim=-1), [new_h]

    def _loss(self, hidden, input, target):
        log_prob, hidden_next = self(input, hidden)
        loss = F.nll_loss(log_prob.view(-1, log_prob.size(2)), target.reshape(-1))
        return loss, hidden_next

    def genotype(self):
        probs = F.softmax(self.weights, dim=-1).data.numpy()
        return [PRIMITIVES[1 + int(np.argmax(p[1:]))] for p in probs]


class Architect(object):
    def __init__(self, model, args):
        self.model = model
        self.optimizer = torch.optim.Adam(self.model.arch_parameters(), lr=args.arch_lr,
                                          betas=(0.9, 0.999), weight_decay=args.arch_weight_decay)

    def step(self, hidden_train, input_train, target_train,
             hidden_valid, input_valid, target_valid, network_optimizer, unrolled):
        self.optimizer.zero_grad()
        if unrolled:
            raise NotImplementedError('second order search is not used in this port')
        hidden = self._backward_step(hidden_valid, input_valid, target_valid)
        self.optimizer.step()
        return hidden, None

    def _backward_step(self, hidden, input, target):
        loss, hidden_next = self.model._loss(hidden, input, target)
        loss.backward()  # raises
        return hidden_next


class SearchRunner(object):
    def __init__(self, args):
        self.args = args
        gen = torch.Generator().manual_seed(args.seed)
        corpus = torch.randint(0, args.ntokens, (600,), generator=gen)
        self.train_data = batchify(corpus[:400], args.batch_size)
        self.search_data = batchify(corpus[400:], args.batch_size)
        self.model = RNNModelSearch(args.ntokens, args.emsize, args.nhid)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, weight_decay=5e-7)
        self.architect = Architect(self.model, args)
        self.history = []

    def train_epoch(self, epoch):
        args, model = self.args, self.model
        model.train()
        total_loss = 0.0
        start = time.time()
        hidden = model.init_hidden(args.batch_size)
        hidden_valid = model.init_hidden(args.batch_size)
        batch, i = 0, 0
        while i < self.train_data.size(0) - 1 - 1:
            seq_len = args.bptt
            data_valid, targets_valid = get_batch(self.search_data, i % (self.search_data.size(0) - 1), args)
            data, targets = get_batch(self.train_data, i, args, seq_len=seq_len)
            if data_valid.size(0) != data.size(0):
                break

            # Starting each batch, we detach the hidden state from how it was previously produced.
            hidden = repackage_hidden(hidden)
            hidden_valid = repackage_hidden(hidden_valid)

            hidden_valid, _ = self.architect.step(hidden, data, targets,
                                                  hidden_valid, data_valid, targets_valid,
                                                  self.optimizer, args.unrolled)

            self.optimizer.zero_grad()
            hidden = repackage_hidden(hidden)
            log_prob, hidden = model(data, hidden)
            raw_loss = F.nll_loss(log_prob.view(-1, log_prob.size(2)), targets.reshape(-1))
            raw_loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            self.optimizer.step()

            total_loss += raw_loss.item()
            batch += 1
            i += seq_len
        elapsed = time.time() - start
        cur_loss = total_loss / max(batch, 1)
        print('| epoch {:3d} | {:5d} batches | ms/batch {:5.2f} | loss {:5.2f} | ppl {:8.2f}'.format(
            epoch, batch, elapsed * 1000 / max(batch, 1), cur_loss, math.exp(min(cur_loss, 20))))
        return cur_loss

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        hidden = self.model.init_hidden(self.args.batch_size)
        total, n = 0.0, 0
        for i in range(0, self.search_data.size(0) - 1, self.args.bptt):
            data, targets = get_batch(self.search_data, i, self.args)
            log_prob, hidden = self.model(data, hidden)
            total += F.nll_loss(log_prob.view(-1, log_prob.size(2)), targets.reshape(-1)).item() * len(data)
            n += len(data)
        return total / n

    def run(self):
        for epoch in range(1, self.args.epochs + 1):
            train_loss = self.train_epoch(epoch)
            val_loss = self.evaluate()
            self.history.append((train_loss, val_loss))
            print('genotype = {}'.format(self.model.genotype()))
        return self.history


def main():
    args = parse_args([])
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    runner = SearchRunner(args)
    runner.run()


if __name__ == '__main__':
    main()
