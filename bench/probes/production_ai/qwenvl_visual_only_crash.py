# expect: no_grad_fn
# source: https://github.com/QwenLM/Qwen-VL/issues/124
"""Qwen-VL style vision-language model, fine-tuning only the visual tower.

Follows the layout of Qwen-VL's modeling_qwen.py / finetune.py: dataclass arguments,
a QWenModel whose token embeddings get the image features written in between the
<img> ... </img> marker tokens, a visual tower (patch ViT + cross-attention Resampler
with learnable queries), a causal LM head, a Trainer with gradient accumulation,
AdamW + warm-up/cosine schedule and an evaluation loop.  The language model and the
LM head are frozen; only the visual tower is trained.  Tiny synthetic model, CPU only.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArguments:
    vocab_size: int = 64
    hidden_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    image_start_id: int = 60
    n_queries: int = 4
    patch: int = 4
    image_size: int = 8


@dataclass
class TrainingArguments:
    learning_rate: float = 1e-4
    weight_decay: float = 0.1
    warmup_steps: int = 1
    max_steps: int = 4
    gradient_accumulation_steps: int = 2
    fix_vit: bool = False
    fix_llm: bool = True
    seed: int = 0


class Resampler(nn.Module):
    def __init__(self, n_queries, embed_dim, kv_dim):
        super().__init__()
        self.query = nn.Parameter(torch.randn(n_queries, embed_dim) * 0.02)
        self.kv_proj = nn.Linear(kv_dim, embed_dim, bias=False)
        self.attn = nn.MultiheadAttention(embed_dim, 4, batch_first=True)
        self.ln_q = nn.LayerNorm(embed_dim)
        self.ln_kv = nn.LayerNorm(embed_dim)

    def forward(self, x):
        kv = self.ln_kv(self.kv_proj(x))
        q = self.ln_q(self.query).unsqueeze(0).expand(x.shape[0], -1, -1)
        out, _ = self.attn(q, kv, kv, need_weights=False)
        return out


class VisionTransformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        width = 24
        self.conv1 = nn.Conv2d(3, width, kernel_size=args.patch, stride=args.patch, bias=False)
        n_patches = (args.image_size // args.patch) ** 2
        self.positional_embedding = nn.Parameter(torch.randn(n_patches, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, 4, 48, dropout=0.0, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, 1)
        self.attn_pool = Resampler(args.n_queries, args.hidden_size, width)
        self.ln_post = nn.LayerNorm(args.hidden_size)
        self.proj = nn.Parameter(torch.randn(args.hidden_size, args.hidden_size) * args.hidden_size ** -0.5)

    def forward(self, x):
        x = self.conv1(x).flatten(2).transpose(1, 2) + self.positional_embedding
        x = self.transformer(x)
        x = self.attn_pool(x)
        return self.ln_post(x) @ self.proj

    def encode(self, images):
        return self(images)


class QWenBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.ln_1 = nn.LayerNorm(args.hidden_size)
        self.attn = nn.MultiheadAttention(args.hidden_size, args.n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(args.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(args.hidden_size, 4 * args.hidden_size), nn.GELU(),
                                 nn.Linear(4 * args.hidden_size, args.hidden_size))

    def forward(self, x, mask):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class QWenModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.wte = nn.Embedding(args.vocab_size, args.hidden_size)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList([QWenBlock(args) for _ in range(args.n_layer)])
        self.ln_f = nn.LayerNorm(args.hidden_size)
        self.visual = VisionTransformer(args)

    def forward(self, input_ids, pixel_values=None):
        images, img_pos = None, None
        if pixel_values is not None and torch.any(input_ids == self.args.image_start_id):
            bos_pos = torch.where(input_ids == self.args.image_start_id)
            eos_pos = torch.where(input_ids == self.args.image_start_id + 1)
            img_pos = torch.stack((bos_pos[0], bos_pos[1], eos_pos[1]), dim=1)
            images = self.visual.encode(pixel_values)
        hidden_states = self.wte(input_ids)
        hidden_states = self.drop(hidden_states)
        if images is not None:
            for idx, (i, a, b) in enumerate(img_pos):
                hidden_states.data[i][a + 1 : b] = images.data[idx]
        n = input_ids.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        for block in self.h:
            hidden_states = block(hidden_states, mask)
        return self.ln_f(hidden_states)


class QWenLMHeadModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.transformer = QWenModel(args)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(self, input_ids, pixel_values=None, labels=None):
        logits = self.lm_head(self.transformer(input_ids, pixel_values))
        loss = None
        if labels is not None:
            shift_logits = logits[:, :-1].contiguous()
            shift_labels = labels[:, 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1), ignore_index=-100)
        return loss, logits


def apply_freezing(model, training_args):
    if training_args.fix_llm:
        model.requires_grad_(False)
        model.transformer.visual.requires_grad_(True)
    if training_args.fix_vit:
        model.transformer.visual.requires_grad_(False)
        model.transformer.visual.attn_pool.requires_grad_(True)


def make_example(args, g):
    n_img = args.n_queries
    text_a = torch.randint(0, 50, (3,), generator=g)
    text_b = torch.randint(0, 50, (5,), generator=g)
    img_tokens = torch.full((n_img,), 2)
    ids = torch.cat([text_a, torch.tensor([args.image_start_id]), img_tokens,
                     torch.tensor([args.image_start_id + 1]), text_b])
    labels = ids.clone()
    labels[: 3 + n_img + 2] = -100
    return ids, labels, torch.randn(3, args.image_size, args.image_size, generator=g)


class Trainer:
    def __init__(self, model, model_args, training_args):
        self.model, self.margs, self.targs = model, model_args, training_args
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=training_args.learning_rate, weight_decay=training_args.weight_decay)
        w, t = training_args.warmup_steps, training_args.max_steps
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: (s + 1) / w if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, t - w))))
        self.state = {"global_step": 0, "log_history": []}

    def compute_loss(self, batch):
        loss, _ = self.model(batch["input_ids"], batch["pixel_values"], batch["labels"])
        return loss

    def training_step(self, batch):
        self.model.train()
        loss = self.compute_loss(batch) / self.targs.gradient_accumulation_steps
        loss.backward()  # raises
        return loss.detach()

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        losses = [self.compute_loss(b).item() for b in batches]
        return {"eval_loss": sum(losses) / len(losses)}

    def train(self, batches, eval_batches):
        for step in range(self.targs.max_steps):
            tr_loss = 0.0
            for micro in range(self.targs.gradient_accumulation_steps):
                tr_loss += self.training_step(batches[(step + micro) % len(batches)]).item()
            self.optimizer.step()
            self.lr_scheduler.step()
            self.optimizer.zero_grad()
            self.state["global_step"] += 1
            self.state["log_history"].append({"loss": tr_loss, **self.evaluate(eval_batches)})
            print(self.state["log_history"][-1])


def collate(examples):
    ids, labels, pix = zip(*examples)
    return {"input_ids": torch.stack(ids), "labels": torch.stack(labels), "pixel_values": torch.stack(pix)}


def main():
    model_args, training_args = ModelArguments(), TrainingArguments()
    torch.manual_seed(training_args.seed)
    g = torch.Generator().manual_seed(training_args.seed)
    model = QWenLMHeadModel(model_args)
    apply_freezing(model, training_args)
    batches = [collate([make_example(model_args, g) for _ in range(2)]) for _ in range(3)]
    eval_batches = [collate([make_example(model_args, g) for _ in range(2)])]
    Trainer(model, model_args, training_args).train(batches, eval_batches)


if __name__ == "__main__":
    main()
