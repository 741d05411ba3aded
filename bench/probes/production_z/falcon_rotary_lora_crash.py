# expect: inference_tensor
# source: https://github.com/huggingface/transformers/issues/28159
"""LoRA instruction fine-tuning of a small Falcon-style causal language model.

The model follows the Falcon remote-code layout: rotary position embeddings
with a cos/sin cache, multi-query attention with a fused query_key_value
projection, and a parallel attention/MLP decoder block.  The base weights are
frozen and LoRA adapters are injected into query_key_value and dense.  A
callback prints a few sample generations before training starts (a quick
sanity check of the prompt template), then the adapters are trained on a
synthetic instruction corpus.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = SimpleNamespace(
    model=SimpleNamespace(vocab_size=96, hidden_size=64, n_head=4, n_layer=2, layer_norm_epsilon=1e-5),
    lora=SimpleNamespace(r=8, alpha=16, dropout=0.05, target_modules=("query_key_value", "dense")),
    train=SimpleNamespace(block_size=32, batch_size=8, steps=6, lr=3e-4, warmup_steps=2,
                          weight_decay=0.0, max_grad_norm=1.0, eval_every=3, seed=0),
    generation=SimpleNamespace(prompts=[[1, 5, 9, 13], [1, 7, 7, 2, 30]], max_new_tokens=32),
)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotary embeddings with a cos/sin cache keyed on sequence length."""

    def __init__(self, head_dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.head_dim = head_dim
        self.seq_len_cached = None
        self.cos_cached = None
        self.sin_cached = None

    def cos_sin(self, seq_len, device="cpu", dtype=torch.float32):
        if seq_len != self.seq_len_cached:
            self.seq_len_cached = seq_len
            t = torch.arange(seq_len, device=device).type_as(self.inv_freq)
            freqs = torch.einsum("i,j->ij", t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1).to(device)
            self.cos_cached = emb.cos()[None, :, :].type(dtype)
            self.sin_cached = emb.sin()[None, :, :].type(dtype)
        return self.cos_cached, self.sin_cached

    def forward(self, q, k):
        batch, seq_len, head_dim = q.shape
        cos, sin = self.cos_sin(seq_len, q.device, q.dtype)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)  # raises


class FalconAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.n_head
        self.head_dim = cfg.hidden_size // cfg.n_head
        self.query_key_value = nn.Linear(cfg.hidden_size, cfg.hidden_size + 2 * self.head_dim, bias=False)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.maybe_rotary = RotaryEmbedding(self.head_dim)

    def _split_heads(self, fused_qkv):
        b, s, _ = fused_qkv.shape
        fused_qkv = fused_qkv.view(b, s, self.num_heads + 2, self.head_dim)
        return fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]

    def forward(self, hidden_states):
        b, s, _ = hidden_states.shape
        q, k, v = self._split_heads(self.query_key_value(hidden_states))
        q = q.transpose(1, 2).reshape(b * self.num_heads, s, self.head_dim)
        k = k.transpose(1, 2).reshape(b, s, self.head_dim)
        v = v.transpose(1, 2).reshape(b, s, self.head_dim)
        k = k.repeat_interleave(self.num_heads, dim=0)
        v = v.repeat_interleave(self.num_heads, dim=0)
        q, k = self.maybe_rotary(q, k)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        attn = attn.view(b, self.num_heads, s, self.head_dim).transpose(1, 2).reshape(b, s, -1)
        return self.dense(attn)


class FalconDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon)
        self.self_attention = FalconAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(),
                                 nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, hidden_states):
        ln = self.input_layernorm(hidden_states)
        # parallel attention + MLP
        return hidden_states + self.self_attention(ln) + self.mlp(ln)


class FalconForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.h = nn.ModuleList([FalconDecoderLayer(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_epsilon)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.word_embeddings.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward(self, input_ids, labels=None):
        x = self.word_embeddings(input_ids)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return SimpleNamespace(loss=loss, logits=logits)


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r, alpha, dropout):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.scaling = alpha / r
        self.lora_dropout = nn.Dropout(dropout)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def get_peft_model(model, lora_cfg):
    for p in model.parameters():
        p.requires_grad_(False)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in lora_cfg.target_modules and isinstance(child, nn.Linear):
                setattr(module, name, LoRALinear(child, lora_cfg.r, lora_cfg.alpha, lora_cfg.dropout))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total:.2f}")
    return model


def generate(model, prompt_ids, max_new_tokens, block_size):
    ids = torch.tensor([prompt_ids])
    for _ in range(max_new_tokens):
        context = ids[:, -block_size:]
        logits = model(context).logits[:, -1, :]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids[0].tolist()


class SampleGenerationCallback:
    def __init__(self, gen_cfg, block_size):
        self.gen_cfg, self.block_size = gen_cfg, block_size

    def on_train_begin(self, trainer):
        trainer.model.eval()
        with torch.inference_mode():
            for prompt in self.gen_cfg.prompts:
                out = generate(trainer.model, prompt, self.gen_cfg.max_new_tokens, self.block_size)
                print("sample:", out[len(prompt):len(prompt) + 12], "...")

    def on_log(self, trainer, logs):
        pass


class PrinterCallback:
    def on_train_begin(self, trainer):
        pass

    def on_log(self, trainer, logs):
        print({k: round(v, 4) for k, v in logs.items()})


def make_instruction_corpus(n, block_size, vocab_size, gen):
    """Synthetic prompt/response pairs: the response repeats the prompt reversed."""
    data = []
    for _ in range(n):
        p = torch.randint(3, vocab_size, (block_size // 2 - 1,), generator=gen)
        seq = torch.cat([torch.tensor([1]), p, torch.tensor([2]), p.flip(0)])[:block_size]
        labels = seq.clone()
        labels[: block_size // 2 + 1] = -100
        data.append((seq, labels))
    return data


class Trainer:
    def __init__(self, model, cfg, train_data, eval_data, callbacks=()):
        self.model, self.cfg = model, cfg
        self.train_data, self.eval_data = train_data, eval_data
        self.callbacks = list(callbacks)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warmup, total = cfg.warmup_steps, cfg.steps
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
        self.state = SimpleNamespace(global_step=0, log_history=[])

    def get_batch(self, data, step):
        n = self.cfg.batch_size
        batch = [data[(step * n + i) % len(data)] for i in range(n)]
        return torch.stack([b[0] for b in batch]), torch.stack([b[1] for b in batch])

    def train_step(self, input_ids, labels):
        self.model.train()
        loss = self.model(input_ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        input_ids, labels = self.get_batch(self.eval_data, 0)
        loss = self.model(input_ids, labels=labels).loss.item()
        return {"eval_loss": loss, "eval_ppl": math.exp(loss)}

    def log(self, logs):
        self.state.log_history.append(logs)
        for cb in self.callbacks:
            cb.on_log(self, logs)

    def train(self):
        for cb in self.callbacks:
            cb.on_train_begin(self)
        for step in range(self.cfg.steps):
            input_ids, labels = self.get_batch(self.train_data, step)
            loss = self.train_step(input_ids, labels)
            self.state.global_step += 1
            logs = {"loss": loss, "lr": self.lr_scheduler.get_last_lr()[0]}
            if self.state.global_step % self.cfg.eval_every == 0:
                logs.update(self.evaluate())
            self.log(logs)
        return self.state


def main():
    cfg = CONFIG
    torch.manual_seed(cfg.train.seed)
    gen = torch.Generator().manual_seed(cfg.train.seed)
    model = get_peft_model(FalconForCausalLM(cfg.model), cfg.lora)
    train_data = make_instruction_corpus(64, cfg.train.block_size, cfg.model.vocab_size, gen)
    eval_data = make_instruction_corpus(16, cfg.train.block_size, cfg.model.vocab_size, gen)
    callbacks = [SampleGenerationCallback(cfg.generation, cfg.train.block_size), PrinterCallback()]
    trainer = Trainer(model, cfg.train, train_data, eval_data, callbacks)
    state = trainer.train()
    print("final", state.log_history[-1])


if __name__ == "__main__":
    main()
