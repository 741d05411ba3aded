# expect: no_grad_fn
# source: https://github.com/huggingface/transformers/issues/21381
"""Prompt-based fine-tuning of a small BERT encoder for sentence classification
(LM-BFF style: the [MASK] position is scored against verbalizer tokens with the
pretrained MLM head).

Memory is kept low by freezing the embeddings, the lower encoder blocks and the
MLM head, checkpointing every encoder block, and accumulating gradients over
several micro-batches.
"""
import logging
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

logger = logging.getLogger(__name__)


@dataclass
class BertConfig:
    vocab_size: int = 120
    hidden_size: int = 32
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 64
    max_position_embeddings: int = 24
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1


@dataclass
class TrainingArguments:
    learning_rate: float = 2e-4
    num_train_epochs: int = 1
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 2
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = True
    gradient_checkpointing_kwargs: dict = field(default_factory=lambda: {"use_reentrant": True})
    freeze_prefixes: tuple = ("bert.embeddings", "bert.encoder.layer.0.", "bert.encoder.layer.1.", "cls.")
    logging_steps: int = 1
    seed: int = 13


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos)[None]
        return self.dropout(self.LayerNorm(x))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = nn.MultiheadAttention(config.hidden_size, config.num_attention_heads,
                                               dropout=config.hidden_dropout_prob, batch_first=True)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.out_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, key_padding_mask):
        attn, _ = self.attention(hidden_states, hidden_states, hidden_states,
                                 key_padding_mask=key_padding_mask, need_weights=False)
        h = self.attn_norm(hidden_states + attn)
        return self.out_norm(h + self.output(F.gelu(self.intermediate(h))))


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.gradient_checkpointing = False
        self._gc_kwargs = {}

    def forward(self, hidden_states, key_padding_mask):
        for layer_module in self.layer:
            if self.gradient_checkpointing and self.training:
                hidden_states = torch.utils.checkpoint.checkpoint(
                    layer_module, hidden_states, key_padding_mask, **self._gc_kwargs)
            else:
                hidden_states = layer_module(hidden_states, key_padding_mask)
        return hidden_states


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)

    def forward(self, input_ids, attention_mask):
        return self.encoder(self.embeddings(input_ids), key_padding_mask=attention_mask == 0)


class BertLMPredictionHead(nn.Module):
    def __init__(self, config, word_embeddings):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder_weight = word_embeddings.weight  # tied
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, h):
        h = self.LayerNorm(F.gelu(self.dense(h)))
        return h @ self.decoder_weight.t() + self.bias


class BertForPromptClassification(nn.Module):
    def __init__(self, config, label_word_ids, mask_token_id):
        super().__init__()
        self.bert = BertModel(config)
        self.cls = BertLMPredictionHead(config, self.bert.embeddings.word_embeddings)
        self.register_buffer("label_word_ids", torch.tensor(label_word_ids))
        self.mask_token_id = mask_token_id

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.bert.encoder.gradient_checkpointing = True
        self.bert.encoder._gc_kwargs = dict(gradient_checkpointing_kwargs or {})

    def forward(self, input_ids, attention_mask, labels=None):
        seq = self.bert(input_ids, attention_mask)
        mask_pos = (input_ids == self.mask_token_id).float().argmax(dim=1)
        h_mask = seq[torch.arange(seq.size(0)), mask_pos]
        logits = self.cls(h_mask)[:, self.label_word_ids]
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


def freeze_by_prefix(model, prefixes):
    n_frozen = 0
    for name, param in model.named_parameters():
        if name.startswith(tuple(prefixes)):
            param.requires_grad_(False)
            n_frozen += param.numel()
    n_total = sum(p.numel() for p in model.parameters())
    logger.info("frozen %d / %d parameters", n_frozen, n_total)


def synthetic_prompts(n, seq_len, vocab, mask_id, gen):
    ids = torch.randint(5, vocab, (n, seq_len), generator=gen)
    ids[:, -2] = mask_id
    labels = (ids[:, 1] % 2).long()
    attn = torch.ones_like(ids)
    attn[: n // 3, -1] = 0
    return ids, attn, labels


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - step) / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def train(model, args, dataset):
    ids, attn, labels = dataset
    bs = args.per_device_train_batch_size
    steps_per_epoch = math.ceil(len(ids) / bs)
    total_updates = steps_per_epoch * args.num_train_epochs // args.gradient_accumulation_steps
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(args.warmup_ratio * total_updates), total_updates)
    model.train()
    global_step = 0
    for epoch in range(args.num_train_epochs):
        for step in range(steps_per_epoch):
            sl = slice(step * bs, (step + 1) * bs)
            loss, _ = model(ids[sl], attn[sl], labels=labels[sl])
            loss = loss / args.gradient_accumulation_steps
            loss.backward()  # raises
            if (step + 1) % args.gradient_accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                global_step += 1
                if global_step % args.logging_steps == 0:
                    logger.info("epoch %d step %d loss %.4f lr %.2e", epoch, global_step,
                                loss.item() * args.gradient_accumulation_steps, scheduler.get_last_lr()[0])
    return global_step


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = TrainingArguments()
    torch.manual_seed(args.seed)
    config = BertConfig()
    mask_token_id, label_words = 3, [10, 11]  # "terrible", "great"
    model = BertForPromptClassification(config, label_words, mask_token_id)
    freeze_by_prefix(model, args.freeze_prefixes)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(args.gradient_checkpointing_kwargs)
    gen = torch.Generator().manual_seed(args.seed)
    dataset = synthetic_prompts(16, 12, config.vocab_size, mask_token_id, gen)
    steps = train(model, args, dataset)
    logger.info("finished %d optimisation steps", steps)


if __name__ == "__main__":
    main()
