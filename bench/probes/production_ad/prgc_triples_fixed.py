# expect: clean
# source: https://github.com/hy-struggle/PRGC/issues/16
"""Joint relational-triple extraction for knowledge-graph construction (PRGC).

A small transformer encoder stands in for BERT; on top of it sit the three PRGC
components: potential-relation prediction, relation-specific sequence tagging of
subjects/objects and a global subject-object correspondence matrix.  The
training script mirrors the original: a params object with n_gpu / multi_gpu,
an optional data-parallel wrapper, BertAdam-like warmup schedule with two
parameter groups (encoder vs. heads), gradient clipping and per-epoch
evaluation of triple F1.  Sentences and triples are synthetic.
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Params:
    def __init__(self):
        self.vocab_size, self.hidden, self.num_rels, self.seq_len = 200, 48, 5, 16
        self.batch_size, self.epoch_num, self.steps_per_epoch = 8, 2, 3
        self.fin_tuning_lr, self.downs_en_lr, self.warmup_prop = 2e-4, 1e-3, 0.1
        self.clip_grad, self.rel_threshold, self.corres_threshold = 2.0, 0.5, 0.5
        self.n_gpu, self.multi_gpu = 2, True
        self.seed = 2020


class MultiNonLinearClassifier(nn.Module):
    def __init__(self, hidden, tag_size, dropout=0.1):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden // 2)
        self.hidden2tag = nn.Linear(hidden // 2, tag_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.hidden2tag(self.dropout(F.relu(self.linear(x))))


class PRGC(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = params
        self.embed = nn.Embedding(params.vocab_size, params.hidden)
        self.pos = nn.Parameter(torch.zeros(1, params.seq_len, params.hidden))
        layer = nn.TransformerEncoderLayer(params.hidden, 4, params.hidden * 2, batch_first=True)
        self.bert = nn.TransformerEncoder(layer, num_layers=1)
        self.rel_judgement = MultiNonLinearClassifier(params.hidden, params.num_rels)
        self.rel_embedding = nn.Embedding(params.num_rels, params.hidden)
        self.sequence_tagging_sub = MultiNonLinearClassifier(2 * params.hidden, 3)
        self.sequence_tagging_obj = MultiNonLinearClassifier(2 * params.hidden, 3)
        self.global_corres = MultiNonLinearClassifier(2 * params.hidden, 1)

    def encode(self, input_ids, attention_mask):
        h = self.embed(input_ids) + self.pos
        return self.bert(h, src_key_padding_mask=attention_mask == 0)

    def forward(self, input_ids, attention_mask, seq_tags=None, potential_rels=None,
                corres_tags=None, rel_tags=None):
        sequence_output = self.encode(input_ids, attention_mask)
        bs, seq_len, h = sequence_output.size()
        mask_f = attention_mask.float()
        h_k_avg = (sequence_output * mask_f[..., None]).sum(1) / mask_f.sum(1, keepdim=True)
        rel_pred = self.rel_judgement(h_k_avg)

        sub_extend = sequence_output.unsqueeze(2).expand(-1, -1, seq_len, -1)
        obj_extend = sequence_output.unsqueeze(1).expand(-1, seq_len, -1, -1)
        corres_pred = self.global_corres(torch.cat([sub_extend, obj_extend], 3)).squeeze(-1)

        rel_emb = self.rel_embedding(potential_rels).unsqueeze(1).expand(-1, seq_len, h)
        decode_input = torch.cat([sequence_output, rel_emb], dim=-1)
        output_sub = self.sequence_tagging_sub(decode_input)
        output_obj = self.sequence_tagging_obj(decode_input)
        if seq_tags is None:
            return rel_pred, corres_pred, output_sub, output_obj

        corres_mask = (mask_f.unsqueeze(-1) * mask_f.unsqueeze(1)).view(-1)
        loss_corres = (F.binary_cross_entropy_with_logits(
            corres_pred.view(-1), corres_tags.view(-1).float(), reduction='none') * corres_mask).sum() / corres_mask.sum()
        loss_seq_sub = (F.cross_entropy(output_sub.view(-1, 3), seq_tags[:, 0].reshape(-1),
                                        reduction='none') * mask_f.view(-1)).sum() / mask_f.sum()
        loss_seq_obj = (F.cross_entropy(output_obj.view(-1, 3), seq_tags[:, 1].reshape(-1),
                                        reduction='none') * mask_f.view(-1)).sum() / mask_f.sum()
        loss_matrix = F.binary_cross_entropy_with_logits(rel_pred, rel_tags.float())
        return (loss_seq_sub + loss_seq_obj) / 2 + loss_corres + loss_matrix


class DataParallel(nn.Module):
    """Scatter the batch over replicas and gather their outputs (torch.nn.DataParallel semantics)."""

    def __init__(self, module, n_replicas):
        super().__init__()
        self.module, self.n_replicas = module, n_replicas

    def forward(self, *inputs):
        chunks = zip(*[x.chunk(self.n_replicas, dim=0) for x in inputs])
        outputs = [self.module(*chunk) for chunk in chunks]
        if outputs[0].dim() == 0:
            return torch.stack(outputs)
        return torch.cat(outputs, dim=0)


def synthetic_batch(params, rng):
    bs, L, R = params.batch_size, params.seq_len, params.num_rels
    input_ids = torch.tensor(rng.integers(1, params.vocab_size, size=(bs, L)))
    attention_mask = torch.ones(bs, L, dtype=torch.long)
    attention_mask[:, L - 3:] = torch.tensor(rng.integers(0, 2, size=(bs, 3)))
    seq_tags = torch.zeros(bs, 2, L, dtype=torch.long)
    corres_tags = torch.zeros(bs, L, L, dtype=torch.long)
    rel_tags = torch.zeros(bs, R, dtype=torch.long)
    potential_rels = torch.tensor(rng.integers(0, R, size=bs))
    for b in range(bs):
        s, o = rng.integers(0, L - 4, size=2)
        seq_tags[b, 0, s], seq_tags[b, 0, s + 1] = 1, 2
        seq_tags[b, 1, o], seq_tags[b, 1, o + 1] = 1, 2
        corres_tags[b, s, o] = 1
        rel_tags[b, potential_rels[b]] = 1
    return input_ids, attention_mask, seq_tags, potential_rels, corres_tags, rel_tags


def warmup_linear(step, total, warmup):
    x = step / max(1, total)
    return x / warmup if x < warmup else max(0.0, (1.0 - x) / (1.0 - warmup))


def evaluate(model, params, rng):
    model.eval()
    core = model.module if isinstance(model, DataParallel) else model
    with torch.no_grad():
        ids, mask, seq_tags, rels, corres, rel_tags = synthetic_batch(params, rng)
        rel_pred, corres_pred, out_sub, out_obj = core(ids, mask, potential_rels=rels)
        pred = (torch.sigmoid(corres_pred) > params.corres_threshold).long()
        tp = (pred * corres).sum().item()
        p = tp / max(1, pred.sum().item())
        r = tp / max(1, corres.sum().item())
    model.train()
    return 2 * p * r / max(1e-8, p + r)


def train(model, params, optimizer, scheduler, rng):
    model.train()
    for epoch in range(params.epoch_num):
        for step in range(params.steps_per_epoch):
            batch = synthetic_batch(params, rng)
            input_ids, attention_mask, seq_tags, potential_rels, corres_tags, rel_tags = batch
            loss = model(input_ids, attention_mask, seq_tags, potential_rels, corres_tags, rel_tags)
            if params.n_gpu > 1 and params.multi_gpu:
                loss = loss.mean()  # mean() to average on multi-gpu.
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=params.clip_grad)
            optimizer.step()
            scheduler.step()
        print(f"epoch {epoch}: loss {loss.item():.4f} corres-F1 {evaluate(model, params, rng):.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--ex_index', type=str, default='1')
    parser.add_argument('--multi_gpu', action='store_true', default=True)
    args = parser.parse_args([])
    params = Params()
    params.multi_gpu = args.multi_gpu
    random.seed(params.seed)
    np.random.seed(params.seed)
    torch.manual_seed(params.seed)
    rng = np.random.default_rng(params.seed)

    model = PRGC(params)
    param_optimizer = list(model.named_parameters())
    encoder_params = [p for n, p in param_optimizer if n.startswith(('embed', 'pos', 'bert'))]
    head_params = [p for n, p in param_optimizer if not n.startswith(('embed', 'pos', 'bert'))]
    optimizer = torch.optim.AdamW([{'params': encoder_params, 'lr': params.fin_tuning_lr},
                                   {'params': head_params, 'lr': params.downs_en_lr}], weight_decay=0.01)
    total = params.epoch_num * params.steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_linear(s + 1, total, params.warmup_prop))
    if params.n_gpu > 1 and params.multi_gpu:
        model = DataParallel(model, params.n_gpu)
    train(model, params, optimizer, scheduler, rng)


if __name__ == '__main__':
    main()
