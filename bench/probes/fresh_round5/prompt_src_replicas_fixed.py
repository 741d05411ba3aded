# expect: clean
# source: https://github.com/muzairkhattak/PromptSRC/issues/6
"""PromptSRC-style prompt learning trainer (self-regulating prompts).

A tiny CLIP-like backbone stands in for the pretrained model; only the
prompt learner is trained.  Multiple "devices" are emulated by a replica
wrapper that scatters the batch and gathers the outputs like DataParallel.
"""
import copy
import math
from types import SimpleNamespace as CN

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1)
np.random.seed(1)

cfg = CN(
    SEED=1,
    NUM_DEVICES=2,
    OPTIM=CN(LR=2e-3, MAX_EPOCH=3),
    DATALOADER=CN(BATCH_SIZE=16),
    TRAINER=CN(PROMPTSRC=CN(PREC="fp32", N_CTX=4, TEXT_LOSS_WEIGHT=25.0,
                            IMAGE_LOSS_WEIGHT=10.0, GPA_MEAN=2, GPA_STD=1)),
)
CLASSNAMES = ["cat", "dog", "car", "ship", "plane"]
EMB, FEAT, SEQ = 32, 24, 8


class TinyCLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_embedding = nn.Embedding(100, EMB)
        self.text_proj = nn.Linear(EMB, FEAT)
        self.visual = nn.Sequential(nn.Linear(48, 64), nn.ReLU(), nn.Linear(64, FEAT))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.dtype = torch.float32

    def encode_text(self, tokens):
        return self.text_proj(self.token_embedding(tokens).mean(1))


class TextEncoder(nn.Module):
    def __init__(self, clip_model):
        super().__init__()
        self.text_proj = clip_model.text_proj

    def forward(self, prompts, tokenized_prompts):
        return self.text_proj(prompts.mean(1))


class VLPromptLearner(nn.Module):
    def __init__(self, cfg, classnames, clip_model):
        super().__init__()
        n_cls, n_ctx = len(classnames), cfg.TRAINER.PROMPTSRC.N_CTX
        self.ctx = nn.Parameter(torch.randn(n_ctx, EMB) * 0.02)
        tokenized_prompts = torch.randint(0, 100, (n_cls, SEQ))
        clip_model_temp_image = copy.deepcopy(clip_model)
        with torch.no_grad():
            embedding = clip_model.token_embedding(tokenized_prompts)
            self.ZS_image_encoder = clip_model_temp_image.visual
            # pre-compute the frozen VL embeddings from several templates
            all_teacher_features = []
            for shift in range(3):
                text_features = clip_model.encode_text((tokenized_prompts + shift) % 100)
                all_teacher_features.append(text_features.unsqueeze(1))
        self.fixed_embeddings = torch.cat(all_teacher_features, dim=1).mean(dim=1)
        self.register_buffer("token_prefix", embedding[:, :1, :])
        self.register_buffer("token_suffix", embedding[:, 1 + n_ctx:, :])
        self.n_cls, self.tokenized_prompts = n_cls, tokenized_prompts

    def forward(self):
        ctx = self.ctx.unsqueeze(0).expand(self.n_cls, -1, -1)
        return torch.cat([self.token_prefix, ctx, self.token_suffix], dim=1)


class CustomCLIP(nn.Module):
    def __init__(self, cfg, classnames, clip_model):
        super().__init__()
        self.prompt_learner = VLPromptLearner(cfg, classnames, clip_model)
        self.tokenized_prompts = self.prompt_learner.tokenized_prompts
        self.image_encoder = clip_model.visual
        self.text_encoder = TextEncoder(clip_model)
        self.logit_scale = clip_model.logit_scale
        self.total_epochs = cfg.OPTIM.MAX_EPOCH

    def forward(self, image, label=None):
        logit_scale = self.logit_scale.exp()
        prompts = self.prompt_learner()
        text_features = self.text_encoder(prompts, self.tokenized_prompts)
        image_features = self.image_encoder(image)
        image_features = image_features / image_features.norm(dim=-1, keepdim=True)
        text_features = text_features / text_features.norm(dim=-1, keepdim=True)
        logits = logit_scale * image_features @ text_features.t()
        if self.prompt_learner.training:
            fixed_embeddings = self.prompt_learner.fixed_embeddings
            fixed_embeddings = fixed_embeddings / fixed_embeddings.norm(dim=-1, keepdim=True)
            with torch.no_grad():
                zero_shot_features = self.prompt_learner.ZS_image_encoder(image)
                zero_shot_features = zero_shot_features / zero_shot_features.norm(dim=-1, keepdim=True)
                zero_shot_logits = logit_scale * zero_shot_features @ fixed_embeddings.t()
            return F.cross_entropy(logits, label), text_features, fixed_embeddings, \
                zero_shot_features, image_features, zero_shot_logits, logits
        return logits


class ReplicaParallel(nn.Module):
    """Scatter the batch over replicas and gather outputs along dim 0 (DataParallel semantics)."""

    def __init__(self, module, num_devices):
        super().__init__()
        self.module, self.num_devices = module, num_devices

    def forward(self, *inputs):
        chunks = [torch.chunk(x, self.num_devices) for x in inputs]
        outputs = [self.module(*[c[i] for c in chunks]) for i in range(self.num_devices)]
        return self.gather(outputs)

    @staticmethod
    def gather(outputs):
        first = outputs[0]
        if isinstance(first, tuple):
            return tuple(ReplicaParallel.gather([o[i] for o in outputs]) for i in range(len(first)))
        if all(t.dim() == 0 for t in outputs):
            # all scalars: unsqueeze and return a vector, one entry per device
            return torch.stack(outputs)
        return torch.cat(outputs, dim=0)


class PromptSRCTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.history = []
        self.build_data()
        self.build_model()

    def build_data(self):
        self.protos = torch.randn(len(CLASSNAMES), 48)
        y = torch.randint(0, len(CLASSNAMES), (96,))
        self.train_x, self.train_y = self.protos[y] + 0.3 * torch.randn(96, 48), y
        self.num_batches = len(y) // self.cfg.DATALOADER.BATCH_SIZE

    def build_model(self):
        cfg = self.cfg
        clip_model = TinyCLIP()
        self.model = CustomCLIP(cfg, CLASSNAMES, clip_model)
        for name, param in self.model.named_parameters():
            param.requires_grad_("prompt_learner" in name and "ZS_image_encoder" not in name)
        enabled = sorted(n for n, p in self.model.named_parameters() if p.requires_grad)
        print(f"Parameters to be updated: {enabled}")
        self.optim = torch.optim.SGD([p for p in self.model.parameters() if p.requires_grad],
                                     lr=cfg.OPTIM.LR, momentum=0.9)
        N, mean, std = cfg.OPTIM.MAX_EPOCH, cfg.TRAINER.PROMPTSRC.GPA_MEAN, cfg.TRAINER.PROMPTSRC.GPA_STD
        gauss = np.array([np.exp(-0.5 * ((a - mean) / std) ** 2) for a in range(1, N + 1)])
        self.gauss = gauss / gauss.sum()
        self.previous_model_gpa = None
        if cfg.NUM_DEVICES > 1:
            print(f"Multiple devices detected (n={cfg.NUM_DEVICES}), use all of them!")
            self.model = ReplicaParallel(self.model, cfg.NUM_DEVICES)

    def forward_backward(self, image, label):
        w = self.cfg.TRAINER.PROMPTSRC
        loss_ce, normalized_text_features, zs_clip_text_embeddings, zs_image_embedd, image_ft, \
            zero_shot_logits, logits = self.model(image, label)
        # one CE value per replica after the gather: average them
        loss_ce = loss_ce.mean()
        loss_scl_text = F.l1_loss(normalized_text_features, zs_clip_text_embeddings,
                                  reduction='mean') * w.TEXT_LOSS_WEIGHT
        loss_scl_image = F.l1_loss(image_ft, zs_image_embedd, reduction='mean') * w.IMAGE_LOSS_WEIGHT
        L_SCL_logits = F.kl_div(F.log_softmax(logits, dim=1), F.log_softmax(zero_shot_logits, dim=1),
                                reduction='sum', log_target=True) / logits.numel()
        loss = loss_ce + L_SCL_logits + loss_scl_text + loss_scl_image
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return {"loss": loss.item()}

    def state_dict_weighting(self, main_dict, weightage):
        return {k: v * weightage for k, v in main_dict.items()}

    def after_epoch(self, epoch):
        weighted = self.state_dict_weighting(copy.deepcopy(self.model.state_dict()), self.gauss[epoch])
        if self.previous_model_gpa is None:
            self.previous_model_gpa = weighted
        else:
            self.previous_model_gpa = {k: weighted[k] + self.previous_model_gpa[k] for k in weighted}

    @torch.no_grad()
    def evaluate(self):
        net = self.model.module if isinstance(self.model, ReplicaParallel) else self.model
        net.eval()
        acc = (net(self.train_x).argmax(1) == self.train_y).float().mean().item()
        net.train()
        return acc

    def train(self):
        bs = self.cfg.DATALOADER.BATCH_SIZE
        for epoch in range(self.cfg.OPTIM.MAX_EPOCH):
            perm = torch.randperm(len(self.train_y))
            for b in range(self.num_batches):
                idx = perm[b * bs:(b + 1) * bs]
                summary = self.forward_backward(self.train_x[idx], self.train_y[idx])
                self.history.append(summary["loss"])
            self.after_epoch(epoch)
            print(f"epoch {epoch + 1}: loss {np.mean(self.history[-self.num_batches:]):.4f} "
                  f"acc {self.evaluate():.3f}")
        print("Using GPA model for final inference...")
        self.model.load_state_dict(self.previous_model_gpa)
        print(f"final acc {self.evaluate():.3f}")


PromptSRCTrainer(cfg).train()
