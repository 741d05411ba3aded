# expect: freed_graph
# source: https://github.com/dropreg/R-Drop/issues/8
"""R-Drop fine-tuning of a small seq2seq summarizer, fairseq-style.

A task object owns train_step/valid_step, a criterion computes the regularized
dropout loss (two stochastic forward passes + symmetric KL), and a thin optimizer
wrapper exposes backward()/step() the way fairseq's FairseqOptimizer does.
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--embed-dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=48)
    p.add_argument("--dropout", type=float, default=0.3)
    p.add_argument("--reg-alpha", type=float, default=0.7)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup-updates", type=int, default=4)
    p.add_argument("--max-update", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--src-len", type=int, default=20)
    p.add_argument("--tgt-len", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


class Seq2SeqSummarizer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.embed_dim, padding_idx=0)
        self.encoder = nn.GRU(args.embed_dim, args.hidden, batch_first=True)
        self.decoder = nn.GRU(args.embed_dim, args.hidden, batch_first=True)
        self.attn_proj = nn.Linear(args.hidden, args.hidden, bias=False)
        self.out = nn.Linear(2 * args.hidden, args.vocab)
        self.dropout = nn.Dropout(args.dropout)

    def forward(self, src_tokens, prev_output_tokens):
        enc_out, h = self.encoder(self.dropout(self.embed(src_tokens)))
        dec_out, _ = self.decoder(self.dropout(self.embed(prev_output_tokens)), h)
        scores = torch.bmm(self.attn_proj(dec_out), enc_out.transpose(1, 2))
        ctx = torch.bmm(F.softmax(scores, dim=-1), enc_out)
        return self.out(self.dropout(torch.cat([dec_out, ctx], dim=-1)))

    def get_normalized_probs(self, logits, log_probs=True):
        return F.log_softmax(logits, dim=-1) if log_probs else F.softmax(logits, dim=-1)


class FairseqOptimizer:
    """Minimal stand-in for fairseq.optim.FairseqOptimizer."""

    def __init__(self, params, lr):
        self._optimizer = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98))

    @property
    def param_groups(self):
        return self._optimizer.param_groups

    def backward(self, loss):
        loss.backward()  # raises

    def clip_grad_norm(self, max_norm, params):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def step(self):
        self._optimizer.step()

    def zero_grad(self):
        self._optimizer.zero_grad()


class InverseSquareRootSchedule:
    def __init__(self, optimizer, lr, warmup):
        self.optimizer, self.base_lr, self.warmup = optimizer, lr, warmup
        self.step_update(0)

    def step_update(self, num_updates):
        if num_updates < self.warmup:
            lr = self.base_lr * (num_updates + 1) / self.warmup
        else:
            lr = self.base_lr * math.sqrt(self.warmup / (num_updates + 1))
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        return lr


class RegDropCrossEntropyCriterion:
    def __init__(self, args, padding_idx=0):
        self.alpha = args.reg_alpha
        self.padding_idx = padding_idx

    def compute_kl_loss(self, net_output, pad_mask):
        p, q = torch.chunk(net_output, 2, dim=0)
        p_lp, q_lp = F.log_softmax(p, dim=-1), F.log_softmax(q, dim=-1)
        p_kl = F.kl_div(p_lp, q_lp.exp(), reduction="none").sum(-1)
        q_kl = F.kl_div(q_lp, p_lp.exp(), reduction="none").sum(-1)
        p_kl = p_kl.masked_fill(pad_mask, 0.0).sum()
        q_kl = q_kl.masked_fill(pad_mask, 0.0).sum()
        return (p_kl + q_kl) / 2

    def forward_reg(self, model, sample, optimizer, reg_alpha, ignore_grad):
        sample_input = sample["net_input"]
        concat_src = torch.cat([sample_input["src_tokens"]] * 2, dim=0)
        concat_prev = torch.cat([sample_input["prev_output_tokens"]] * 2, dim=0)
        net_output = model(concat_src, concat_prev)
        lprobs = model.get_normalized_probs(net_output)
        target = torch.cat([sample["target"]] * 2, dim=0)
        nll = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1),
                         ignore_index=self.padding_idx, reduction="sum")
        pad_mask = sample["target"].eq(self.padding_idx)
        kl = self.compute_kl_loss(net_output, pad_mask)
        loss = nll + reg_alpha * kl
        if ignore_grad:
            loss *= 0
        optimizer.backward(loss)
        ntokens = sample["ntokens"]
        logging_output = {"loss": loss.item(), "nll_loss": nll.item(), "kl": kl.item(),
                          "ntokens": ntokens, "sample_size": ntokens}
        return loss, ntokens, logging_output

    def forward(self, model, sample):
        logits = model(sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"])
        lprobs = model.get_normalized_probs(logits)
        nll = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1),
                         ignore_index=self.padding_idx, reduction="sum")
        return nll, sample["ntokens"], {"loss": nll.item(), "ntokens": sample["ntokens"]}


class RDropSummarizationTask:
    def __init__(self, args):
        self.args = args

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        model.train()
        loss, sample_size, logging_output = criterion.forward_reg(
            model, sample, optimizer, self.args.reg_alpha, ignore_grad)
        if ignore_grad:
            loss *= 0
        optimizer.backward(loss)
        return loss, sample_size, logging_output

    @torch.no_grad()
    def valid_step(self, sample, model, criterion):
        model.eval()
        return criterion.forward(model, sample)


def make_batch(args, rng):
    src = torch.randint(3, args.vocab, (args.batch_size, args.src_len), generator=rng)
    tgt = src[:, : args.tgt_len].flip(1).clone()
    tgt[:, -1] = 2  # eos
    prev = torch.cat([torch.full((args.batch_size, 1), 2, dtype=torch.long), tgt[:, :-1]], dim=1)
    return {"net_input": {"src_tokens": src, "prev_output_tokens": prev},
            "target": tgt, "ntokens": int(tgt.ne(0).sum())}


class Trainer:
    def __init__(self, args, task, model, criterion):
        self.args, self.task, self.model, self.criterion = args, task, model, criterion
        self.optimizer = FairseqOptimizer(model.parameters(), args.lr)
        self.lr_scheduler = InverseSquareRootSchedule(self.optimizer, args.lr, args.warmup_updates)
        self.num_updates = 0
        self.callbacks = []

    def train_step(self, sample):
        self.optimizer.zero_grad()
        loss, sample_size, log = self.task.train_step(sample, self.model, self.criterion,
                                                      self.optimizer, self.num_updates)
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.div_(max(sample_size, 1))
        self.optimizer.clip_grad_norm(0.1, self.model.parameters())
        self.optimizer.step()
        self.num_updates += 1
        log["lr"] = self.lr_scheduler.step_update(self.num_updates)
        for cb in self.callbacks:
            cb(self.num_updates, log)
        return log

    def evaluate(self, sample):
        loss, sample_size, log = self.task.valid_step(sample, self.model, self.criterion)
        return loss.item() / max(sample_size, 1)


def main():
    args = get_args([])
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = torch.Generator().manual_seed(args.seed)
    task = RDropSummarizationTask(args)
    model = Seq2SeqSummarizer(args)
    criterion = RegDropCrossEntropyCriterion(args)
    trainer = Trainer(args, task, model, criterion)
    history = []
    trainer.callbacks.append(lambda step, log: history.append(log["loss"] / log["ntokens"]))
    valid = make_batch(args, rng)
    for _ in range(args.max_update):
        trainer.train_step(make_batch(args, rng))
    print("train nll/tok:", [round(h, 3) for h in history])
    print("valid nll/tok:", round(trainer.evaluate(valid), 4))


if __name__ == "__main__":
    main()
