# expect: clean
# source: https://github.com/modelscope/modelscope/issues/481
"""Contrastive fine-tuning of a Chinese-CLIP style image/text dual encoder.

A ViT image tower and a BERT-like text tower are wrapped by a multi-modal
embedding model that serves both training and inference, and an epoch based
trainer drives it with hooks (optimizer, lr scheduler, evaluation). Evaluation
reports image-to-text and text-to-image recall@1 on a held-out synthetic split.
"""
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModeKeys:
    TRAIN = "train"
    EVAL = "eval"
    INFERENCE = "inference"


class OutputKeys:
    IMG_EMBEDDING = "img_embedding"
    TEXT_EMBEDDING = "text_embedding"
    LOSS = "loss"


cfg = {
    "model": {"embed_dim": 32,
              "vision": {"image_resolution": 32, "patch_size": 8, "width": 64, "layers": 2, "heads": 4},
              "text": {"vocab_size": 128, "context_length": 16, "hidden_size": 64, "layers": 2, "heads": 4}},
    "train": {"max_epochs": 2, "batch_size": 8, "num_samples": 64, "lr": 5e-4, "wd": 0.001, "warmup": 2,
              "eval_interval": 1},
    "seed": 42,
}
PAD_ID, CLS_ID, SEP_ID = 0, 1, 2


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_1 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(OrderedDict([("c_fc", nn.Linear(d_model, d_model * 4)), ("gelu", nn.GELU()),
                                              ("c_proj", nn.Linear(d_model * 4, d_model))]))
        self.ln_2 = nn.LayerNorm(d_model)

    def forward(self, x):
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class VisualTransformer(nn.Module):
    def __init__(self, image_resolution, patch_size, width, layers, heads, output_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size, bias=False)
        scale = width ** -0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(scale * torch.randn((image_resolution // patch_size) ** 2 + 1, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = nn.Sequential(*[ResidualAttentionBlock(width, heads) for _ in range(layers)])
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x):
        x = self.conv1(x).flatten(2).permute(0, 2, 1)
        cls = self.class_embedding + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding
        x = self.transformer(self.ln_pre(x).permute(1, 0, 2)).permute(1, 0, 2)
        return self.ln_post(x[:, 0, :]) @ self.proj


class BertModel(nn.Module):
    def __init__(self, vocab_size, context_length, hidden_size, layers, heads):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(context_length, hidden_size)
        self.token_type_embeddings = nn.Embedding(2, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden_size, heads, hidden_size * 4, dropout=0.0,
                                           activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.size(1)).unsqueeze(0)
        emb = self.word_embeddings(input_ids) + self.position_embeddings(pos) \
            + self.token_type_embeddings(torch.zeros_like(input_ids))
        return self.encoder(self.LayerNorm(emb), src_key_padding_mask=~attention_mask)


class CLIP(nn.Module):
    def __init__(self, embed_dim, vision, text):
        super().__init__()
        self.visual = VisualTransformer(output_dim=embed_dim, **vision)
        self.bert = BertModel(**text)
        self.text_projection = nn.Parameter(torch.randn(text["hidden_size"], embed_dim) * text["hidden_size"] ** -0.5)
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

    def encode_image(self, image):
        return self.visual(image)

    def encode_text(self, text):
        attn_mask = text.ne(PAD_ID)
        x = self.bert(text, attention_mask=attn_mask)
        return x[:, 0, :] @ self.text_projection


class CLIPForMultiModalEmbedding(nn.Module):
    def __init__(self, model_cfg):
        super().__init__()
        self.clip_model = CLIP(**model_cfg)

    @property
    def device(self):
        return next(self.parameters()).device

    def forward(self, input):
        output = {OutputKeys.IMG_EMBEDDING: None, OutputKeys.TEXT_EMBEDDING: None}
        mode = input.get("mode", ModeKeys.INFERENCE)
        if "img" in input and isinstance(input["img"], torch.Tensor):
            image_tensor = input["img"].to(self.device)
            if image_tensor.dim() == 5 and image_tensor.shape[1] == 1:
                image_tensor = image_tensor.squeeze(1)
            with torch.autograd.set_grad_enabled(mode == ModeKeys.TRAIN):
                image_features = self.clip_model.encode_image(image_tensor)
                image_features = image_features / image_features.norm(dim=-1, keepdim=True)  # l2-normalize
            output[OutputKeys.IMG_EMBEDDING] = image_features
        if "text" in input and isinstance(input["text"], torch.Tensor):
            text_tensor = input["text"].to(self.device)
            if text_tensor.dim() == 3 and text_tensor.shape[1] == 1:
                text_tensor = text_tensor.squeeze(1)
            with torch.autograd.set_grad_enabled(mode == ModeKeys.TRAIN):
                text_features = self.clip_model.encode_text(text_tensor)
                text_features = text_features / text_features.norm(dim=-1, keepdim=True)  # l2-normalize
            output[OutputKeys.TEXT_EMBEDDING] = text_features
        if mode == ModeKeys.TRAIN:
            output["logit_scale"] = (self.clip_model.logit_scale * 1.0).exp().mean()
        return output


def get_loss(model_outputs, loss_img, loss_txt):
    image_features = model_outputs[OutputKeys.IMG_EMBEDDING]
    text_features = model_outputs[OutputKeys.TEXT_EMBEDDING]
    logits_per_image = model_outputs["logit_scale"] * image_features @ text_features.t()
    ground_truth = torch.arange(len(logits_per_image)).long()
    return (loss_img(logits_per_image, ground_truth) + loss_txt(logits_per_image.t(), ground_truth)) / 2


def get_optimizer_params(model, wd):
    exclude = lambda n: "bn" in n or "ln" in n or "LayerNorm" in n or "bias" in n or "logit_scale" in n
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if exclude(n)], "weight_decay": 0.0},
            {"params": [p for n, p in named if not exclude(n)], "weight_decay": wd}]


def cosine_lr(step, total, warmup, base_lr):
    if step < warmup:
        return base_lr * (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))) * base_lr


class Hook:
    def before_train_iter(self, trainer): pass
    def after_train_iter(self, trainer): pass
    def after_train_epoch(self, trainer): pass


class OptimizerHook(Hook):
    def before_train_iter(self, trainer):
        trainer.optimizer.zero_grad()

    def after_train_iter(self, trainer):
        trainer.train_outputs[OutputKeys.LOSS].backward()
        trainer.optimizer.step()
        with torch.no_grad():
            trainer.model.clip_model.logit_scale.clamp_(0, math.log(100))


class LrSchedulerHook(Hook):
    def before_train_iter(self, trainer):
        lr = cosine_lr(trainer.iter, trainer.max_iters, cfg["train"]["warmup"], cfg["train"]["lr"])
        for group in trainer.optimizer.param_groups:
            group["lr"] = lr


class EvaluationHook(Hook):
    def after_train_epoch(self, trainer):
        if (trainer.epoch + 1) % cfg["train"]["eval_interval"] == 0:
            print(f"epoch {trainer.epoch}: {trainer.evaluate()}")


class CLIPTrainer:
    def __init__(self, model, train_data, eval_data, hooks):
        self.model, self.train_data, self.eval_data = model, train_data, eval_data
        self.optimizer = torch.optim.AdamW(get_optimizer_params(model, cfg["train"]["wd"]), lr=cfg["train"]["lr"])
        self.loss_img, self.loss_txt = nn.CrossEntropyLoss(), nn.CrossEntropyLoss()
        self.hooks = hooks
        self.epoch, self.iter, self.train_outputs = 0, 0, None
        bs = cfg["train"]["batch_size"]
        self.max_iters = cfg["train"]["max_epochs"] * (len(train_data[0]) // bs)

    def invoke_hook(self, name):
        for hook in self.hooks:
            getattr(hook, name)(self)

    def train_step(self, batch):
        self.model.train()
        outputs = self.model({"img": batch[0], "text": batch[1], "mode": ModeKeys.TRAIN})
        outputs[OutputKeys.LOSS] = get_loss(outputs, self.loss_img, self.loss_txt)
        self.train_outputs = outputs

    def evaluate(self):
        self.model.eval()
        with torch.no_grad():
            out = self.model({"img": self.eval_data[0], "text": self.eval_data[1], "mode": ModeKeys.EVAL})
        sim = out[OutputKeys.IMG_EMBEDDING] @ out[OutputKeys.TEXT_EMBEDDING].t()
        target = torch.arange(sim.size(0))
        return {"i2t_r1": (sim.argmax(1) == target).float().mean().item(),
                "t2i_r1": (sim.argmax(0) == target).float().mean().item()}

    def train(self):
        bs = cfg["train"]["batch_size"]
        images, texts = self.train_data
        for self.epoch in range(cfg["train"]["max_epochs"]):
            perm = torch.randperm(len(images))
            for start in range(0, len(images) - bs + 1, bs):
                idx = perm[start:start + bs]
                self.invoke_hook("before_train_iter")
                self.train_step((images[idx], texts[idx]))
                self.invoke_hook("after_train_iter")
                self.iter += 1
            self.invoke_hook("after_train_epoch")


def tokenize(captions, context_length):
    ids = torch.full((len(captions), context_length), PAD_ID, dtype=torch.long)
    for i, cap in enumerate(captions):
        toks = [CLS_ID] + [3 + (ord(c) % 120) for c in cap][:context_length - 2] + [SEP_ID]
        ids[i, :len(toks)] = torch.tensor(toks)
    return ids


def make_pairs(n, seed):
    g = torch.Generator().manual_seed(seed)
    colors = ["红色", "蓝色", "绿色", "黄色"]
    shapes = ["圆形", "方块", "条纹", "斑点"]
    images, captions = torch.zeros(n, 3, 32, 32), []
    for i in range(n):
        c, s = i % 4, (i // 4) % 4
        images[i, c % 3] += 0.5 + 0.5 * c / 3
        images[i, :, s * 8:(s + 1) * 8] += 1.0
        captions.append(f"一张{colors[c]}{shapes[s]}的图片")
    images += 0.1 * torch.randn(images.shape, generator=g)
    return images, tokenize(captions, cfg["model"]["text"]["context_length"])


def main():
    torch.manual_seed(cfg["seed"])
    model = CLIPForMultiModalEmbedding(cfg["model"])
    train_data = make_pairs(cfg["train"]["num_samples"], cfg["seed"])
    eval_data = make_pairs(16, cfg["seed"] + 1)
    trainer = CLIPTrainer(model, train_data, eval_data, [LrSchedulerHook(), OptimizerHook(), EvaluationHook()])
    trainer.train()


if __name__ == "__main__":
    main()
