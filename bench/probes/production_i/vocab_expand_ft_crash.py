# expect: inference_tensor
# source: https://github.com/unslothai/unsloth-zoo/pull/137
"""Full fine-tuning of a small decoder-only LM on sequences of new "visual"
tokens. New tokens are added with an unsloth-zoo style `add_new_tokens`
helper (resize embeddings + lm_head, initialise new rows to the mean of the
trained rows), then the whole model is trained.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class ToyTokenizer:
    def __init__(self, words):
        self.vocab = {w: i for i, w in enumerate(["<pad>", "<bos>", "<eos>"] + words)}

    def __len__(self):
        return len(self.vocab)

    def add_tokens(self, new_tokens):
        for tok in new_tokens:
            if tok not in self.vocab:
                self.vocab[tok] = len(self.vocab)
        return len(new_tokens)

    def __call__(self, text, add_special_tokens=True):
        ids = [self.vocab[w] for w in text.split()]
        if add_special_tokens:
            ids = [self.vocab["<bos>"]] + ids + [self.vocab["<eos>"]]
        return SimpleNamespace(input_ids=ids)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size)
        self.self_attn = nn.MultiheadAttention(cfg.hidden_size, cfg.num_heads, batch_first=True)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size)
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x, causal_mask):
        h = self.input_layernorm(x)
        h, _ = self.self_attn(h, h, h, attn_mask=causal_mask, need_weights=False)
        x = x + h
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class TinyModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size)

    def forward(self, input_ids):
        T = input_ids.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class TinyForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.model = TinyModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def resize_token_embeddings(self, new_num_tokens):
        old_emb, old_head = self.get_input_embeddings(), self.get_output_embeddings()
        n_old = old_emb.weight.shape[0]
        new_emb = nn.Embedding(new_num_tokens, old_emb.embedding_dim)
        new_head = nn.Linear(old_head.in_features, new_num_tokens, bias=False)
        new_emb.weight.data[:n_old] = old_emb.weight.data
        new_head.weight.data[:n_old] = old_head.weight.data
        self.model.embed_tokens, self.lm_head = new_emb, new_head
        self.config.vocab_size = new_num_tokens
        return new_emb

    def forward(self, input_ids, labels=None):
        hidden_states = self.model(input_ids)
        logits = self.lm_head(hidden_states)  # raises
        loss = None
        if labels is not None:
            shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
            shift_labels = labels[:, 1:].reshape(-1)
            loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=-100)
        return SimpleNamespace(loss=loss, logits=logits)


@torch.inference_mode
def mean_of_trained_tokens(model, eps=1e-16):
    embedding_matrix = model.get_input_embeddings().weight.clone()
    lm_head_matrix = model.get_output_embeddings().weight.clone()
    indicator_untrained = torch.amax(embedding_matrix, axis=1) <= eps
    where_untrained = torch.where(indicator_untrained)[0]
    n_trained = embedding_matrix.shape[0] - where_untrained.shape[0]
    sum_embedding = torch.sum(embedding_matrix, dtype=torch.float32, axis=0)
    sum_lm_head = torch.sum(lm_head_matrix, dtype=torch.float32, axis=0)
    sum_embedding -= torch.sum(embedding_matrix[where_untrained], dtype=torch.float32, axis=0)
    sum_lm_head -= torch.sum(lm_head_matrix[where_untrained], dtype=torch.float32, axis=0)
    return sum_embedding / n_trained, sum_lm_head / n_trained


@torch.inference_mode
def add_new_tokens(model, tokenizer, new_tokens=[], method="mean", interpolation=0.5):
    """Resizes the tokenizer and the model, and initialises the new rows."""
    assert isinstance(new_tokens, (list, tuple)) and len(new_tokens) > 0
    overlapping_tokens = set(new_tokens) & set(tokenizer.vocab.keys())
    new_tokens = [x for x in new_tokens if x not in overlapping_tokens]

    mean_embedding, mean_lm_head = mean_of_trained_tokens(model)
    old_input_length = model.get_input_embeddings().weight.shape[0]

    old_length = len(tokenizer)
    tokenizer.add_tokens(new_tokens)
    # Also resizes lm_head as well!
    model.resize_token_embeddings(len(tokenizer))

    embedding_matrix = model.get_input_embeddings().weight
    lm_head_matrix = model.get_output_embeddings().weight
    if embedding_matrix.shape[0] != (old_input_length + len(new_tokens)):
        raise RuntimeError("Embedding matrix size did not get resized properly.")

    if method == "interpolation":
        for j, token in enumerate(new_tokens):
            input_ids = tokenizer(token, add_special_tokens=False).input_ids
            mean_embedding_token = embedding_matrix[input_ids].mean(axis=0)
            mean_lm_head_token = lm_head_matrix[input_ids].mean(axis=0)
            embedding_matrix[old_length + j] = mean_embedding * (1 - interpolation) + mean_embedding_token * interpolation
            lm_head_matrix[old_length + j] = mean_lm_head * (1 - interpolation) + mean_lm_head_token * interpolation
    else:
        # Now set the new tokens to the mean!
        embedding_matrix[old_length:] = mean_embedding
        lm_head_matrix[old_length:] = mean_lm_head

    # We set a flag to say we need to train embeddings
    model._need_to_train_embeddings = True


def make_batches(tokenizer, n_visual, n_batches, batch_size, seq_len, seed):
    g = torch.Generator().manual_seed(seed)
    words = [w for w in tokenizer.vocab if w.startswith("w")]
    for _ in range(n_batches):
        rows = []
        for _ in range(batch_size):
            vis = torch.randint(0, n_visual, (seq_len // 2,), generator=g).tolist()
            txt = torch.randint(0, len(words), (seq_len // 2,), generator=g).tolist()
            text = " ".join(["<VIS_%d>" % v for v in vis] + [words[t] for t in txt])
            rows.append(tokenizer(text).input_ids)
        input_ids = torch.tensor(rows)
        yield input_ids, input_ids.clone()


def train(cfg):
    torch.manual_seed(cfg.seed)
    tokenizer = ToyTokenizer(["w%d" % i for i in range(cfg.base_vocab)])
    model_cfg = SimpleNamespace(vocab_size=len(tokenizer), hidden_size=32, num_heads=4,
                                intermediate_size=64, num_layers=2)
    model = TinyForCausalLM(model_cfg)

    new_tokens = ["<VIS_%d>" % i for i in range(cfg.n_visual_tokens)]
    add_new_tokens(model, tokenizer, new_tokens=new_tokens)

    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    total = cfg.epochs * cfg.batches_per_epoch // cfg.grad_accum
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    model.train()
    step = 0
    for epoch in range(cfg.epochs):
        for i, (input_ids, lm_labels) in enumerate(make_batches(
                tokenizer, cfg.n_visual_tokens, cfg.batches_per_epoch, cfg.batch_size,
                cfg.seq_len, seed=epoch)):
            outputs = model(input_ids=input_ids, labels=lm_labels)
            (outputs.loss / cfg.grad_accum).backward()
            if (i + 1) % cfg.grad_accum == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
                step += 1
        print("epoch {} step {} loss {:.4f}".format(epoch, step, outputs.loss.item()))


if __name__ == "__main__":
    train(SimpleNamespace(seed=0, base_vocab=40, n_visual_tokens=16, lr=3e-4, epochs=2,
                          batches_per_epoch=4, batch_size=4, seq_len=12, grad_accum=2))
