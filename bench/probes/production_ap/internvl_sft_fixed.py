# expect: clean
# source: https://github.com/modelscope/ms-swift/issues/6753
"""InternVL-style chat model fine-tuned with an ms-swift-like SFT trainer.

A tiny ViT produces patch features that a pixel-shuffle MLP projector maps into
the language model's embedding space; image-context tokens in the prompt are
replaced by the projected visual tokens before the decoder runs. The trainer
follows the swift recipe: dataclass arguments, freeze_llm / freeze_vit switches,
gradient checkpointing (with enable_input_require_grads), AdamW with separate
projector / ViT learning rates, cosine warmup schedule, logging and eval
callbacks. Synthetic image-caption data on CPU.
"""
import math
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IMG_CONTEXT_ID = 3


@dataclass
class TrainArguments:
    vocab_size: int = 64
    hidden_size: int = 32
    vit_hidden: int = 24
    num_layers: int = 2
    image_size: int = 16
    patch_size: int = 4
    downsample_ratio: float = 0.5
    freeze_llm: bool = True
    freeze_vit: bool = False
    gradient_checkpointing: bool = True
    learning_rate: float = 2e-4
    vit_lr: float = 5e-5
    warmup_ratio: float = 0.1
    max_steps: int = 6
    eval_steps: int = 3
    batch_size: int = 2
    seq_len: int = 12
    callbacks: List[str] = field(default_factory=lambda: ['log', 'eval'])


class TinyViT(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.patch = nn.Conv2d(3, args.vit_hidden, args.patch_size, args.patch_size)
        n = (args.image_size // args.patch_size) ** 2
        self.pos = nn.Parameter(torch.zeros(1, n, args.vit_hidden))
        layer = nn.TransformerEncoderLayer(args.vit_hidden, 2, args.vit_hidden * 2, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, pixel_values):
        x = self.patch(pixel_values).flatten(2).transpose(1, 2) + self.pos
        return self.encoder(x)


class DecoderLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(args.hidden_size) for _ in range(args.num_layers)])
        self.norm = nn.LayerNorm(args.hidden_size)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.gradient_checkpointing = False

    def get_input_embeddings(self):
        return self.embed_tokens

    def forward(self, inputs_embeds):
        n = inputs_embeds.size(1)
        mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=1)
        h = inputs_embeds
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(layer, h, mask, use_reentrant=False)
            else:
                h = layer(h, mask)
        return self.lm_head(self.norm(h))


class InternVLChatModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.vision_model = TinyViT(args)
        self.language_model = TinyLM(args)
        vit_in = args.vit_hidden * int(1 / args.downsample_ratio) ** 2
        self.mlp1 = nn.Sequential(nn.LayerNorm(vit_in), nn.Linear(vit_in, args.hidden_size), nn.GELU(),
                                  nn.Linear(args.hidden_size, args.hidden_size))
        self._input_require_grads_hook = None

    @property
    def num_image_token(self):
        grid = self.args.image_size // self.args.patch_size
        return int((grid * self.args.downsample_ratio) ** 2)

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)
        self._input_require_grads_hook = self.language_model.get_input_embeddings().register_forward_hook(
            make_inputs_require_grads)

    def gradient_checkpointing_enable(self):
        self.language_model.gradient_checkpointing = True

    @staticmethod
    def pixel_shuffle(x, scale_factor=0.5):
        n, w, h, c = x.size()
        x = x.view(n, w, int(h * scale_factor), int(c / scale_factor))
        x = x.permute(0, 2, 1, 3).contiguous()
        x = x.view(n, int(h * scale_factor), int(w * scale_factor), int(c / (scale_factor * scale_factor)))
        return x.permute(0, 2, 1, 3).contiguous()

    def extract_feature(self, pixel_values):
        vit_embeds = self.vision_model(pixel_values)
        h = w = int(vit_embeds.shape[1] ** 0.5)
        vit_embeds = vit_embeds.reshape(vit_embeds.shape[0], h, w, -1)
        vit_embeds = self.pixel_shuffle(vit_embeds, scale_factor=self.args.downsample_ratio)
        vit_embeds = vit_embeds.reshape(vit_embeds.shape[0], -1, vit_embeds.shape[-1])
        return self.mlp1(vit_embeds)

    def forward(self, pixel_values, input_ids, labels=None):
        input_embeds = self.language_model.get_input_embeddings()(input_ids)
        vit_embeds = self.extract_feature(pixel_values)
        selected = input_ids == IMG_CONTEXT_ID
        input_embeds = input_embeds.clone()
        input_embeds[selected] = vit_embeds.reshape(-1, vit_embeds.shape[-1]).to(input_embeds.dtype)
        logits = self.language_model(input_embeds)
        if labels is None:
            return logits, None
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                               ignore_index=-100)
        return logits, loss


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step + 1) / float(max(1, num_warmup_steps))
        progress = (step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def prepare_model(model, args):
    if args.freeze_llm:
        model.language_model.requires_grad_(False)
    if args.freeze_vit:
        model.vision_model.requires_grad_(False)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model


class SwiftTrainer:
    def __init__(self, model, args, train_data, eval_data):
        self.model, self.args = model, args
        self.train_data, self.eval_data = train_data, eval_data
        groups = [{'params': [p for p in model.mlp1.parameters() if p.requires_grad], 'lr': args.learning_rate},
                  {'params': [p for p in model.vision_model.parameters() if p.requires_grad], 'lr': args.vit_lr}]
        groups += [{'params': [p for p in model.language_model.parameters() if p.requires_grad],
                    'lr': args.learning_rate}]
        self.optimizer = torch.optim.AdamW([g for g in groups if g['params']], weight_decay=0.01)
        self.lr_scheduler = get_cosine_schedule_with_warmup(
            self.optimizer, int(args.warmup_ratio * args.max_steps), args.max_steps)
        self.global_step = 0
        self.log_history = []

    def train_step(self, batch):
        self.model.train()
        _, loss = self.model(**batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses = [self.model(**b)[1].item() for b in self.eval_data]
        return sum(losses) / len(losses)

    def on_step_end(self, loss):
        if 'log' in self.args.callbacks:
            self.log_history.append({'step': self.global_step, 'loss': loss,
                                     'lr': self.lr_scheduler.get_last_lr()[0]})
            print(self.log_history[-1])
        if 'eval' in self.args.callbacks and self.global_step % self.args.eval_steps == 0:
            print({'step': self.global_step, 'eval_loss': self.evaluate()})

    def train(self):
        while self.global_step < self.args.max_steps:
            for batch in self.train_data:
                loss = self.train_step(batch)
                self.global_step += 1
                self.on_step_end(loss)
                if self.global_step >= self.args.max_steps:
                    break


def build_dataset(args, model, n_batches, seed):
    g = torch.Generator().manual_seed(seed)
    batches = []
    n_img = model.num_image_token
    for _ in range(n_batches):
        pixel_values = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=g)
        text = torch.randint(4, args.vocab_size, (args.batch_size, args.seq_len), generator=g)
        img_ctx = torch.full((args.batch_size, n_img), IMG_CONTEXT_ID)
        bos = torch.ones(args.batch_size, 1, dtype=torch.long)
        input_ids = torch.cat([bos, img_ctx, text], dim=1)
        labels = input_ids.clone()
        labels[:, :1 + n_img] = -100
        batches.append({'pixel_values': pixel_values, 'input_ids': input_ids, 'labels': labels})
    return batches


def main():
    torch.manual_seed(0)
    args = TrainArguments()
    model = prepare_model(InternVLChatModel(args), args)
    trainer = SwiftTrainer(model, args, build_dataset(args, model, 3, 0), build_dataset(args, model, 1, 1))
    trainer.train()


if __name__ == '__main__':
    main()
