# expect: freed_graph
# source: https://github.com/open-mmlab/mmsegmentation/issues/3577
"""SAN-style open-vocabulary semantic segmentation trainer (mmseg layout).

A CLIP-like text encoder turns class names into class embeddings which a side
adapter / mask decoder matches against pixel embeddings.  The text encoder is
fine-tuned together with the segmentor (its freeze and no_grad were removed),
and it keeps the per-dataset class embeddings in a cache dict.  Runner,
optimizer wrapper with param-wise lr, poly scheduler and logger hooks follow
the mmengine structure.  Synthetic 32x32 images, 5 classes, CPU only.
"""
import math
import zlib
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ("road", "building", "vegetation", "sky", "car")
TEMPLATES = ("a photo of a {}.", "a rendering of a {}.", "there is a {} in the scene.")

cfg = dict(
    model=dict(
        type="MultimodalEncoderDecoder",
        text_encoder=dict(vocab_size=512, context_length=12, embed_dims=32, num_layers=2,
                          num_heads=4, output_dims=32, cache_feature=True, cat_bg=False),
        backbone=dict(in_channels=3, embed_dims=32),
        decode_head=dict(num_classes=len(CLASSES), ignore_index=255),
    ),
    optim_wrapper=dict(lr=2e-4, weight_decay=1e-4, paramwise_cfg=dict(text_encoder_lr_mult=0.1)),
    param_scheduler=dict(power=0.9, max_iters=6),
    train_cfg=dict(max_iters=6, val_interval=3),
    default_hooks=dict(logger=dict(interval=1)),
)


def tokenize(texts, context_length, vocab_size):
    out = torch.zeros(len(texts), context_length, dtype=torch.long)
    for i, t in enumerate(texts):
        words = t.replace(".", " .").split()[: context_length - 2]
        ids = [1] + [2 + zlib.crc32(w.encode()) % (vocab_size - 3) for w in words] + [vocab_size - 1]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


class CLIPTextEncoder(nn.Module):
    def __init__(self, vocab_size, context_length, embed_dims, num_layers, num_heads,
                 output_dims, cache_feature=True, cat_bg=False):
        super().__init__()
        self.vocab_size = vocab_size
        self.num_pos = context_length
        self.token_embedding = nn.Embedding(vocab_size, embed_dims)
        self.positional_embedding = nn.Parameter(torch.randn(context_length, embed_dims) * 0.01)
        self.text_projection = nn.Parameter(torch.randn(embed_dims, output_dims) / math.sqrt(embed_dims))
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))
        layer = nn.TransformerEncoderLayer(embed_dims, num_heads, 4 * embed_dims, dropout=0.0, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, num_layers)
        self.ln_final = nn.LayerNorm(embed_dims)
        self.register_buffer("attn_mask", self.build_attention_mask(), persistent=False)
        self.cache_feature = cache_feature
        if self.cache_feature:
            self.cache = {}
        self.cat_bg = cat_bg
        if self.cat_bg:
            self.bg_embed = nn.Parameter(torch.randn(1, output_dims))

    def build_attention_mask(self):
        mask = torch.empty(self.num_pos, self.num_pos)
        mask.fill_(float("-inf"))
        mask.triu_(1)
        return mask

    def encode_text(self, text, normalize=False):
        x = self.token_embedding(text) + self.positional_embedding
        x = self.transformer(x, mask=self.attn_mask)
        x = self.ln_final(x)
        x = x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection
        return F.normalize(x, dim=-1) if normalize else x

    def template_encode(self, vocabulary):
        bucket = []
        for template in TEMPLATES:
            tokens = tokenize([template.format(n) for n in vocabulary], self.num_pos, self.vocab_size)
            bucket.append(self.encode_text(tokens, normalize=True))
        text_embed = torch.stack(bucket).mean(dim=0)
        return text_embed / text_embed.norm(dim=-1, keepdim=True)

    def forward(self, dataset_name="synthetic_city"):
        class_names = list(CLASSES)
        if self.cache_feature:
            if dataset_name not in self.cache:
                class_embeds = self.template_encode(class_names)
                self.cache[dataset_name] = class_embeds
            else:
                class_embeds = self.cache[dataset_name]
        else:
            class_embeds = self.template_encode(class_names)
        if self.cat_bg:
            class_embeds = F.normalize(torch.cat([class_embeds, self.bg_embed]), p=2, dim=-1)
        return self.logit_scale.exp() * class_embeds


class SideAdapterBackbone(nn.Module):
    def __init__(self, in_channels, embed_dims):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, embed_dims, 3, 2, 1), nn.GELU(),
                                  nn.Conv2d(embed_dims, embed_dims, 3, 1, 1), nn.GELU())
        self.proj = nn.Conv2d(embed_dims, embed_dims, 1)

    def forward(self, x):
        return self.proj(self.stem(x))


class MultimodalEncoderDecoder(nn.Module):
    def __init__(self, text_encoder, backbone, decode_head):
        super().__init__()
        self.text_encoder = CLIPTextEncoder(**text_encoder)
        self.backbone = SideAdapterBackbone(**backbone)
        self.num_classes = decode_head["num_classes"]
        self.ignore_index = decode_head["ignore_index"]

    def _forward(self, inputs):
        class_embeds = self.text_encoder()
        feats = F.normalize(self.backbone(inputs), dim=1)
        logits = torch.einsum("bchw,kc->bkhw", feats, class_embeds)
        return F.interpolate(logits, size=inputs.shape[-2:], mode="bilinear", align_corners=False)

    def loss(self, inputs, data_samples):
        seg_logits = self._forward(inputs)
        loss_ce = F.cross_entropy(seg_logits, data_samples, ignore_index=self.ignore_index)
        return dict(loss_ce=loss_ce)

    def predict(self, inputs):
        return self._forward(inputs).argmax(dim=1)


class OptimWrapper:
    def __init__(self, model, lr, weight_decay, paramwise_cfg):
        text_params = [p for p in model.text_encoder.parameters() if p.requires_grad]
        text_ids = {id(p) for p in text_params}
        other = [p for p in model.parameters() if id(p) not in text_ids]
        self.optimizer = torch.optim.AdamW([
            dict(params=other, lr=lr),
            dict(params=text_params, lr=lr * paramwise_cfg["text_encoder_lr_mult"]),
        ], lr=lr, weight_decay=weight_decay)

    def update_params(self, loss):
        self.optimizer.zero_grad()
        loss.backward()  # raises
        self.optimizer.step()


class PolyLR:
    def __init__(self, optimizer, power, max_iters):
        self.optimizer, self.power, self.max_iters = optimizer, power, max_iters
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]

    def step(self, it):
        factor = (1 - it / self.max_iters) ** self.power
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = base * factor


class LoggerHook:
    def __init__(self, interval):
        self.interval = interval
        self.history = []

    def after_train_iter(self, runner, it, log_vars):
        self.history.append(log_vars)
        if it % self.interval == 0:
            print("iter %d  " % it + "  ".join("%s: %.4f" % kv for kv in log_vars.items()))


class Runner:
    def __init__(self, cfg):
        self.cfg = SimpleNamespace(**cfg)
        model_cfg = {k: v for k, v in self.cfg.model.items() if k != "type"}
        self.model = MultimodalEncoderDecoder(**model_cfg)
        self.optim_wrapper = OptimWrapper(self.model, **self.cfg.optim_wrapper)
        self.scheduler = PolyLR(self.optim_wrapper.optimizer, **self.cfg.param_scheduler)
        self.hooks = [LoggerHook(**self.cfg.default_hooks["logger"])]
        g = torch.Generator().manual_seed(0)
        self.train_data = [self._make_batch(g) for _ in range(4)]
        self.val_data = [self._make_batch(g) for _ in range(2)]

    @staticmethod
    def _make_batch(g, bs=2, size=32):
        imgs = torch.randn(bs, 3, size, size, generator=g)
        labels = torch.randint(0, len(CLASSES), (bs, size, size), generator=g)
        labels[:, :2] = 255
        return imgs, labels

    @staticmethod
    def parse_losses(losses):
        log_vars = {k: v.mean() for k, v in losses.items()}
        loss = sum(v for k, v in log_vars.items() if "loss" in k)
        return loss, {k: v.item() for k, v in log_vars.items()}

    def train_step(self, data):
        inputs, data_samples = data
        losses = self.model.loss(inputs, data_samples)
        parsed, log_vars = self.parse_losses(losses)
        self.optim_wrapper.update_params(parsed)
        return log_vars

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        inter = torch.zeros(len(CLASSES))
        union = torch.zeros(len(CLASSES))
        for inputs, labels in self.val_data:
            pred = self.model.predict(inputs)
            valid = labels != 255
            for c in range(len(CLASSES)):
                p, t = (pred == c) & valid, (labels == c) & valid
                inter[c] += (p & t).sum()
                union[c] += (p | t).sum()
        self.model.train()
        miou = (inter / union.clamp(min=1)).mean().item()
        print("val mIoU: %.4f" % miou)
        return miou

    def train(self):
        self.model.train()
        max_iters = self.cfg.train_cfg["max_iters"]
        for it in range(1, max_iters + 1):
            data = self.train_data[(it - 1) % len(self.train_data)]
            log_vars = self.train_step(data)
            self.scheduler.step(it)
            for hook in self.hooks:
                hook.after_train_iter(self, it, log_vars)
            if it % self.cfg.train_cfg["val_interval"] == 0:
                self.evaluate()


def main():
    torch.manual_seed(0)
    runner = Runner(cfg)
    runner.train()


if __name__ == "__main__":
    main()
