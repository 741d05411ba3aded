# expect: leaf_inplace
# source: https://github.com/modelscope/ms-swift/issues/4613
"""Supervised fine-tuning of a small Qwen2-VL-style vision-language model.

The model has a ViT-style vision tower with a patch merger, a decoder-only
language model and an LM head.  Fine-tuning follows an ms-swift-like recipe:
the LLM embeddings and blocks are frozen, the vision merger and LM head are
trained, gradient checkpointing is on (so the input embeddings are made to
require grad by a forward hook).  The template merges image features into the
token embeddings and keeps the vision tower in the graph for text-only
samples.  The mixed image/text dataset is seeded synthetic data.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IMAGE_TOKEN_ID = 3


class VisionTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, cfg.vision_dim, kernel_size=cfg.patch, stride=cfg.patch)
        self.block = nn.TransformerEncoderLayer(cfg.vision_dim, nhead=2, dim_feedforward=2 * cfg.vision_dim,
                                                batch_first=True, dropout=0.0)
        self.merger = nn.Sequential(nn.LayerNorm(cfg.vision_dim), nn.Linear(cfg.vision_dim, cfg.hidden),
                                    nn.GELU(), nn.Linear(cfg.hidden, cfg.hidden))

    def forward(self, pixel_values):
        x = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)
        return self.merger(self.block(x)).reshape(-1, self.merger[-1].out_features)


class DecoderLayer(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.attn = nn.MultiheadAttention(hidden, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.SiLU(), nn.Linear(2 * hidden, hidden))
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)

    def forward(self, x, causal_mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=causal_mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class LanguageModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([DecoderLayer(cfg.hidden) for _ in range(cfg.n_layers)])
        self.norm = nn.LayerNorm(cfg.hidden)
        self.gradient_checkpointing = False

    def forward(self, inputs_embeds):
        t = inputs_embeds.size(1)
        causal_mask = torch.triu(torch.full((t, t), float('-inf')), 1)
        h = inputs_embeds
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(layer, h, causal_mask, use_reentrant=True)
            else:
                h = layer(h, causal_mask)
        return self.norm(h)


class Qwen2VLForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.visual = VisionTower(cfg)
        self.model = LanguageModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def gradient_checkpointing_enable(self):
        self.model.gradient_checkpointing = True

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, inputs_embeds, labels=None):
        logits = self.lm_head(self.model(inputs_embeds))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return SimpleNamespace(loss=loss, logits=logits)


class Qwen2VLTemplate:
    """Builds inputs_embeds from input_ids and pixel_values (ms-swift `_post_encode`)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def _post_encode(self, model, inputs):
        input_ids = inputs['input_ids']
        pixel_values = inputs.get('pixel_values')
        inputs_embeds = model.get_input_embeddings()(input_ids)
        if pixel_values is None:
            # plain-text batch: run a dummy image through the vision tower so every
            # trainable parameter takes part in the step (zero3 / ddp friendly)
            dummy_pixel = torch.zeros(1, 3, self.cfg.image_size, self.cfg.image_size)
            image_embeds = model.visual(dummy_pixel)
            inputs_embeds += image_embeds.mean() * 0.  # raises
        else:
            image_embeds = model.visual(pixel_values)
            image_mask = (input_ids == IMAGE_TOKEN_ID).unsqueeze(-1).expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds.to(inputs_embeds.dtype))
        return {'inputs_embeds': inputs_embeds, 'labels': inputs['labels']}


def make_dataset(cfg, n_batches, seed):
    g = torch.Generator().manual_seed(seed)
    n_img_tokens = (cfg.image_size // cfg.patch) ** 2
    batches = []
    for b in range(n_batches):
        ids = torch.randint(4, cfg.vocab, (1, cfg.seq_len), generator=g)
        batch = {'input_ids': ids, 'labels': ids.clone()}
        if b % 2 == 0:
            ids[0, 1:1 + n_img_tokens] = IMAGE_TOKEN_ID
            batch['labels'][0, :1 + n_img_tokens] = -100
            batch['pixel_values'] = torch.rand(1, 3, cfg.image_size, cfg.image_size, generator=g)
        batches.append(batch)
    return batches


class Seq2SeqTrainer:
    def __init__(self, model, template, args):
        self.model, self.template, self.args = model, template, args
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / args.warmup_steps))

    def training_step(self, batch):
        self.model.train()
        inputs = self.template._post_encode(self.model, batch)
        loss = self.model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        return loss.item()

    def train(self, dataset):
        for epoch in range(self.args.num_train_epochs):
            for step, batch in enumerate(dataset):
                print('epoch %d step %d loss %.4f' % (epoch, step, self.training_step(batch)))


def prepare_model(model, args):
    for p in model.model.parameters():
        p.requires_grad = False
    for p in model.visual.patch_embed.parameters():
        p.requires_grad = False
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model


def main():
    torch.manual_seed(0)
    cfg = SimpleNamespace(vocab=64, hidden=32, n_layers=2, vision_dim=16, patch=4, image_size=8, seq_len=12)
    args = SimpleNamespace(lr=1e-3, warmup_steps=2, num_train_epochs=1, gradient_checkpointing=True)
    model = prepare_model(Qwen2VLForCausalLM(cfg), args)
    trainer = Seq2SeqTrainer(model, Qwen2VLTemplate(cfg), args)
    trainer.train(make_dataset(cfg, n_batches=4, seed=0))


if __name__ == '__main__':
    main()
