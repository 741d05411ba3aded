# expect: grad_unused
# source: https://github.com/lorraine2/implicit-hyper-opt/issues/13
"""Tuning LSTM language-model dropout rates with implicit-function-theorem hypergradients.

Hypergradient = - dLv/dw * (d^2 Lt / dw dlambda), with an optional Neumann
series approximation of the inverse Hessian (num_neumann_terms=0 -> identity).
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable, grad

parser = argparse.ArgumentParser(description='LSTM language model with tuned dropout')
parser.add_argument('--emsize', type=int, default=24)
parser.add_argument('--nhid', type=int, default=24)
parser.add_argument('--bptt', type=int, default=12)
parser.add_argument('--batch_size', type=int, default=8)
parser.add_argument('--lr', type=float, default=1e-2)
parser.add_argument('--hyper_lr', type=float, default=1e-2)
parser.add_argument('--dropouto', type=float, default=0.4)
parser.add_argument('--dropouti', type=float, default=0.4)
parser.add_argument('--alpha', type=float, default=2.0)
parser.add_argument('--beta', type=float, default=1.0)
parser.add_argument('--dropout_type', type=str, default='standard', choices=['standard', 'concrete'])
parser.add_argument('--tune', type=str, default='dropouto')
parser.add_argument('--num_neumann_terms', type=int, default=0)
parser.add_argument('--train_steps', type=int, default=6)
parser.add_argument('--seed', type=int, default=1111)
args = parser.parse_args([])

torch.manual_seed(args.seed)
np.random.seed(args.seed)


## rnn_utils
def logit(x):
    return np.log(x) - np.log(1 - x)


def inv_softplus(x):
    return np.log(np.exp(x) - 1)


class LockedDropout(nn.Module):
    def forward(self, x, dropout_logit=0.5):
        if not self.training or not dropout_logit:
            return x
        drop_prob = torch.sigmoid(dropout_logit)
        m = x.data.new(1, x.size(1), x.size(2)).bernoulli_(1 - drop_prob)
        mask = Variable(m.div_(1 - drop_prob), requires_grad=False)
        return mask.expand_as(x) * x


class ConcreteDropout(nn.Module):
    def forward(self, x, p_logit):
        if not self.training:
            return x
        p = torch.sigmoid(p_logit)
        eps, temp = 1e-7, 0.1
        unif_noise = torch.rand((1, x.size(1), x.size(2)))
        drop_prob = (torch.log(p + eps) - torch.log(1 - p + eps) + torch.log(unif_noise + eps)
                     - torch.log(1 - unif_noise + eps))
        mask = (1 - torch.sigmoid(drop_prob / temp)) / (1 - p)
        return x * mask.expand_as(x)


## data
ntokens = 40
corpus = torch.tensor(np.random.choice(ntokens, 3000, p=np.random.dirichlet(np.ones(ntokens))))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[:nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source, i, seq_len):
    seq_len = min(seq_len, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


train_data = batchify(corpus[:2400], args.batch_size)
hyperval_data = batchify(corpus[2400:], args.batch_size)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, dropouto, dropouti, dropout_type):
        super(RNNModel, self).__init__()
        self.lockdrop = ConcreteDropout() if dropout_type == 'concrete' else LockedDropout()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)
        self.dropouto, self.dropouti, self.nhid = dropouto, dropouti, nhid

    def forward(self, input, hidden, return_h=False):
        emb = self.lockdrop(self.encoder(input), self.dropouti)
        raw_output, hidden = self.rnn(emb, hidden)
        output = self.lockdrop(raw_output, self.dropouto)
        result = self.decoder(output.view(-1, self.nhid))
        if return_h:
            return result, hidden, [raw_output], [output]
        return result, hidden

    def init_hidden(self, bsz):
        return (torch.zeros(1, bsz, self.nhid), torch.zeros(1, bsz, self.nhid))


## tunable hyperparameters
dropouto = torch.full([1], logit(args.dropouto), requires_grad=True)
dropouti = torch.full([1], logit(args.dropouti), requires_grad=True)
alpha = torch.full([1], inv_softplus(args.alpha), requires_grad=True)
beta = torch.full([1], inv_softplus(args.beta), requires_grad=True)
model = RNNModel(ntokens, args.emsize, args.nhid, dropouto, dropouti, args.dropout_type)
criterion = nn.CrossEntropyLoss()
hparams = [h for name, h in [('dropouto', dropouto), ('dropouti', dropouti), ('alpha', alpha), ('beta', beta)]
           if name in args.tune]


def get_hyper_train():
    return hparams


def gather_flat_grad(loss_grad):
    return torch.cat([p.reshape(-1) for p in loss_grad])


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


state = {'train_pos': 0, 'val_pos': 0, 'train_hidden': model.init_hidden(args.batch_size),
         'val_hidden': model.init_hidden(args.batch_size)}


def train_loss_func():
    model.train()
    if state['train_pos'] >= len(train_data) - 1:
        state['train_pos'], state['train_hidden'] = 0, model.init_hidden(args.batch_size)
    data, targets = get_batch(train_data, state['train_pos'], args.bptt)
    output, hidden, rnn_hs, dropped_rnn_hs = model(data, repackage_hidden(state['train_hidden']), return_h=True)
    state['train_hidden'] = hidden
    xentropy_loss = criterion(output, targets)
    loss = xentropy_loss + sum(F.softplus(alpha) * h.pow(2).mean() for h in dropped_rnn_hs[-1:])
    loss = loss + sum(F.softplus(beta) * (h[1:] - h[:-1]).pow(2).mean() for h in rnn_hs[-1:])
    state['train_pos'] += args.bptt
    return xentropy_loss, loss


def val_loss_func():
    model.eval()
    if state['val_pos'] >= len(hyperval_data) - 1:
        state['val_pos'], state['val_hidden'] = 0, model.init_hidden(args.batch_size)
    data, targets = get_batch(hyperval_data, state['val_pos'], args.bptt)
    output, state['val_hidden'] = model(data, repackage_hidden(state['val_hidden']))
    state['val_pos'] += args.bptt
    return criterion(output, targets)


def neumann_hyperstep_preconditioner(d_val_loss_d_theta, d_train_loss_d_w, elementary_lr, num_neumann_terms):
    preconditioner = d_val_loss_d_theta.detach()
    counter = preconditioner
    for i in range(num_neumann_terms):
        hessian_term = (counter.view(1, -1) @ d_train_loss_d_w.view(-1, 1) @ d_train_loss_d_w.view(1, -1)).view(-1)
        counter = counter - elementary_lr * hessian_term
        preconditioner = preconditioner + counter
    return preconditioner


def store_hypergrad(get_hyper_train, total_d_val_loss_d_lambda):
    current_index = 0
    for p in get_hyper_train():
        p_num_params = np.prod(p.shape)
        p.grad = total_d_val_loss_d_lambda[current_index:current_index + p_num_params].view(p.shape)
        current_index += p_num_params


def hyper_step(d_train_loss_d_w):
    """Estimate the hypergradient, and store it in the hyperparameters' .grad."""
    d_train_loss_d_w = gather_flat_grad(d_train_loss_d_w)
    model.zero_grad()
    val_loss = val_loss_func()
    d_val_loss_d_theta = gather_flat_grad(grad(val_loss, model.parameters()))
    preconditioner = neumann_hyperstep_preconditioner(d_val_loss_d_theta, d_train_loss_d_w,
                                                      args.lr, args.num_neumann_terms)
    indirect_grad = gather_flat_grad(grad(d_train_loss_d_w, get_hyper_train(), grad_outputs=preconditioner.view(-1)))  # raises
    store_hypergrad(get_hyper_train, -indirect_grad)
    return val_loss, indirect_grad.norm()


def main():
    param_optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    hyper_optimizer = torch.optim.Adam(get_hyper_train(), lr=args.hyper_lr)
    start = time.time()
    for step in range(args.train_steps):
        xentropy_loss, regularized_loss = train_loss_func()
        param_optimizer.zero_grad()
        train_grad = grad(regularized_loss, model.parameters(), create_graph=True)
        val_loss, grad_norm = hyper_step(train_grad)
        hyper_optimizer.step()
        flat_train_grad = gather_flat_grad(train_grad).detach()
        idx = 0
        for p in model.parameters():
            p.grad = flat_train_grad[idx:idx + p.numel()].view(p.shape)
            idx += p.numel()
        param_optimizer.step()
        print('step {:2d} | train ppl {:7.2f} | val ppl {:7.2f} | hypergrad norm {:.4f} | dropouto {:.3f}'.format(
            step, np.exp(xentropy_loss.item()), np.exp(val_loss.item()), grad_norm.item(),
            torch.sigmoid(dropouto).item()))
    print('done in {:.1f}s'.format(time.time() - start))


main()
