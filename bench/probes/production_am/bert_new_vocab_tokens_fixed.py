# expect: clean
# source: https://github.com/huggingface/transformers/issues/1413
"""Domain-adaptive fine-tuning of a small BERT classifier after adding new vocabulary tokens.

Domain words (drug names, gene symbols) are split into many word pieces by the base
tokenizer, so the script adds them as whole tokens, resizes the token embedding matrix
the way `resize_token_embeddings` does (new nn.Embedding, old rows copied), initialises
each new row from the mean of the word-piece embeddings it replaces, and then fine-tunes
a sequence-classification head with AdamW, linear warm-up and an evaluation callback.
Synthetic tokens and labels, CPU only.
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
    p.add_argument("--hidden_size", type=int, default=32)
    p.add_argument("--num_layers", type=int, default=2)
    p.add_argument("--num_heads", type=int, default=4)
    p.add_argument("--max_len", type=int, default=16)
    p.add_argument("--num_labels", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup_ratio", type=float, default=0.1)
    p.add_argument("--new_tokens", nargs="*", default=["imatinib", "brca1", "tp53", "rituximab"])
    p.add_argument("--seed", type=int, default=13)
    return p.parse_args(argv)


class WordPieceTokenizer:
    """Tiny greedy word-piece tokenizer over a fixed piece vocabulary."""

    def __init__(self, pieces):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
        for piece in pieces:
            self.vocab.setdefault(piece, len(self.vocab))
        self.added_tokens = {}

    def __len__(self):
        return len(self.vocab)

    def add_tokens(self, tokens):
        added = 0
        for tok in tokens:
            if tok not in self.vocab:
                self.vocab[tok] = len(self.vocab)
                self.added_tokens[tok] = self.vocab[tok]
                added += 1
        return added

    def tokenize(self, word):
        if word in self.added_tokens:
            return [word]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                cand = word[start:end] if start == 0 else "##" + word[start:end]
                if cand in self.vocab:
                    pieces.append(cand)
                    start = end
                    break
            else:
                return ["[UNK]"]
        return pieces

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab.get(t, 1) for t in tokens]

    def encode(self, words, max_len):
        toks = ["[CLS]"] + [p for w in words for p in self.tokenize(w)][:max_len - 2] + ["[SEP]"]
        ids = self.convert_tokens_to_ids(toks)
        return ids + [0] * (max_len - len(ids))


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden, max_len):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_len, hidden)
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.size(1)).unsqueeze(0)
        return self.dropout(self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(pos)))


class BertForSequenceClassification(nn.Module):
    def __init__(self, vocab_size, args):
        super().__init__()
        self.config = args
        self.embeddings = BertEmbeddings(vocab_size, args.hidden_size, args.max_len)
        layer = nn.TransformerEncoderLayer(args.hidden_size, args.num_heads, 4 * args.hidden_size,
                                           dropout=0.1, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, args.num_layers, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(args.hidden_size, args.hidden_size), nn.Tanh())
        self.classifier = nn.Linear(args.hidden_size, args.num_labels)

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def resize_token_embeddings(self, new_num_tokens):
        old = self.get_input_embeddings()
        old_num, dim = old.weight.shape
        new = nn.Embedding(new_num_tokens, dim, padding_idx=old.padding_idx)
        nn.init.normal_(new.weight, std=0.02)
        n = min(old_num, new_num_tokens)
        with torch.no_grad():
            new.weight[:n, :] = old.weight[:n, :]
        self.set_input_embeddings(new)
        return new

    def forward(self, input_ids, labels=None):
        mask = input_ids.eq(0)
        hidden = self.encoder(self.embeddings(input_ids), src_key_padding_mask=mask)
        logits = self.classifier(self.pooler(hidden[:, 0]))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


def init_new_token_embeddings(model, tokenizer, base_pieces, new_tokens):
    """Start every added token at the mean of the word pieces it used to be split into."""
    emb = model.get_input_embeddings()
    with torch.no_grad():
        for tok in new_tokens:
            piece_ids = tokenizer.convert_tokens_to_ids(base_pieces[tok])
            sub_emb = emb.weight[piece_ids]
            emb.weight[tokenizer.vocab[tok], :] = sub_emb.mean(0)
    return emb


def build_corpus(tokenizer, words, args, n, rng):
    data = []
    for _ in range(n):
        sent = [rng.choice(words) for _ in range(rng.randrange(4, 8))]
        label = sum(len(w) for w in sent) % args.num_labels
        data.append((tokenizer.encode(sent, args.max_len), label))
    return data


class EvalCallback:
    def __init__(self):
        self.history = []

    def on_evaluate(self, epoch, metrics):
        self.history.append((epoch, metrics))
        print(f"[eval] epoch {epoch}: {metrics}")


class Trainer:
    def __init__(self, model, args, train_data, eval_data, callbacks=()):
        self.model, self.args = model, args
        self.train_data, self.eval_data = train_data, eval_data
        self.callbacks = list(callbacks)
        no_decay = ["bias", "LayerNorm.weight"]
        groups = [
            {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
            {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=args.lr)
        total = args.epochs * math.ceil(len(train_data) / args.batch_size)
        warmup = int(total * args.warmup_ratio)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: (s + 1) / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))

    @staticmethod
    def batches(data, bs):
        for i in range(0, len(data), bs):
            chunk = data[i:i + bs]
            yield torch.tensor([c[0] for c in chunk]), torch.tensor([c[1] for c in chunk])

    def train_step(self, input_ids, labels):
        self.model.train()
        loss, _ = self.model(input_ids, labels)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        correct = total = 0
        for ids, labels in self.batches(self.eval_data, self.args.batch_size):
            _, logits = self.model(ids)
            correct += (logits.argmax(-1) == labels).sum().item()
            total += labels.numel()
        return {"accuracy": correct / max(total, 1)}

    def train(self):
        for epoch in range(self.args.epochs):
            random.shuffle(self.train_data)
            losses = [self.train_step(ids, y) for ids, y in self.batches(self.train_data, self.args.batch_size)]
            print(f"epoch {epoch} train loss {np.mean(losses):.4f}")
            metrics = self.evaluate()
            for cb in self.callbacks:
                cb.on_evaluate(epoch, metrics)


def main(argv=None):
    args = get_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    pieces = ["the", "patient", "dose", "gene", "was", "given", "mutation", "in",
              "im", "##at", "##ini", "##b", "br", "##ca", "##1", "tp", "##53", "ri", "##tu", "##xi", "##ma", "##b"]
    tokenizer = WordPieceTokenizer(pieces)
    model = BertForSequenceClassification(len(tokenizer), args)

    base_pieces = {tok: tokenizer.tokenize(tok) for tok in args.new_tokens}
    num_added = tokenizer.add_tokens(args.new_tokens)
    print(f"added {num_added} tokens; vocab size {len(tokenizer)}")
    model.resize_token_embeddings(len(tokenizer))
    init_new_token_embeddings(model, tokenizer, base_pieces, args.new_tokens)

    words = ["the", "patient", "dose", "gene", "was", "given", "mutation", "in"] + args.new_tokens
    train_data = build_corpus(tokenizer, words, args, 48, rng)
    eval_data = build_corpus(tokenizer, words, args, 16, rng)
    trainer = Trainer(model, args, train_data, eval_data, callbacks=[EvalCallback()])
    trainer.train()


if __name__ == "__main__":
    main([])
