# expect: nonscalar_backward
# source: https://github.com/muzairkhattak/multimodal-prompt-learning/issues/37
"""MaPLe multi-modal prompt learning on a frozen CLIP-like model (Dassl trainer layout).

Learnable language prompts are coupled to vision prompts through per-depth
projection layers; the image and text encoders stay frozen.  In training mode
the CustomCLIP forward returns the cross-entropy loss directly.  The Dassl-style
trainer wraps the model in a data-parallel wrapper when more than one replica
is configured (the wrapper scatters the batch, runs each replica and gathers
the outputs like nn.DataParallel).  yacs-like nested config, SGD + cosine
schedule with constant warmup.  Synthetic 16x16 images, CPU only.
"""
from types import SimpleNamespace as CN

import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = CN(
    TRAINER=CN(MAPLE=CN(N_CTX=2, PROMPT_DEPTH=2, PREC="fp32")),
    OPTIM=CN(NAME="sgd", LR=0.0035, MAX_EPOCH=2, WARMUP_EPOCH=1, WARMUP_CONS_LR=1e-5),
    DATALOADER=CN(BATCH_SIZE=6, NUM_REPLICAS=2),
    MODEL=CN(WIDTH=32, N_CLS=4, SEQ=6),
)


class FrozenTextEncoder(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.randn(width, width) / width ** 0.5)

    def forward(self, prompts, deep_prompts):
        x = prompts
        n_ctx = deep_prompts[0].shape[0] if deep_prompts else 0
        for i, layer in enumerate(self.layers):
            if i > 0 and i - 1 < len(deep_prompts):
                ctx = deep_prompts[i - 1].unsqueeze(0).expand(x.shape[0], -1, -1)
                x = torch.cat([x[:, :1], ctx, x[:, 1 + n_ctx:]], 1)
            x = x + torch.tanh(layer(x))
        return self.ln_final(x[:, -1]) @ self.text_projection


class FrozenImageEncoder(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.patch = nn.Conv2d(3, width, 4, 4)
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
        self.proj = nn.Linear(width, width)

    def forward(self, image, shared_ctx, deep_vision):
        x = self.patch(image).flatten(2).transpose(1, 2)
        x = torch.cat([shared_ctx.unsqueeze(0).expand(x.shape[0], -1, -1), x], 1)
        n_ctx = shared_ctx.shape[0]
        for i, layer in enumerate(self.layers):
            if i > 0 and i - 1 < len(deep_vision):
                x = torch.cat([deep_vision[i - 1].unsqueeze(0).expand(x.shape[0], -1, -1), x[:, n_ctx:]], 1)
            x = x + torch.tanh(layer(x))
        return self.proj(x.mean(1))


class MultiModalPromptLearner(nn.Module):
    def __init__(self, cfg, token_embedding):
        super().__init__()
        n_ctx, width = cfg.TRAINER.MAPLE.N_CTX, cfg.MODEL.WIDTH
        self.n_ctx = n_ctx
        self.ctx = nn.Parameter(torch.randn(n_ctx, width) * 0.02)
        self.proj = nn.Linear(width, width)
        depth = cfg.TRAINER.MAPLE.PROMPT_DEPTH
        self.compound_prompts_text = nn.ParameterList(
            [nn.Parameter(torch.randn(n_ctx, width) * 0.02) for _ in range(depth - 1)])
        self.compound_prompt_projections = nn.ModuleList([nn.Linear(width, width) for _ in range(depth - 1)])
        g = torch.Generator().manual_seed(7)
        name_tokens = torch.randint(0, 50, (cfg.MODEL.N_CLS, cfg.MODEL.SEQ - n_ctx - 1), generator=g)
        with torch.no_grad():
            embedding = token_embedding(name_tokens)
        self.register_buffer("token_prefix", token_embedding.weight[:1].detach().expand(cfg.MODEL.N_CLS, 1, -1).clone())
        self.register_buffer("token_suffix", embedding)

    def forward(self):
        ctx = self.ctx.unsqueeze(0).expand(self.token_prefix.shape[0], -1, -1)
        prompts = torch.cat([self.token_prefix, ctx, self.token_suffix], dim=1)
        visual_deep = [layer(p) for layer, p in zip(self.compound_prompt_projections, self.compound_prompts_text)]
        return prompts, self.proj(self.ctx), list(self.compound_prompts_text), visual_deep


class CustomCLIP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        width = cfg.MODEL.WIDTH
        self.token_embedding = nn.Embedding(64, width)
        self.prompt_learner = MultiModalPromptLearner(cfg, self.token_embedding)
        self.text_encoder = FrozenTextEncoder(width, cfg.TRAINER.MAPLE.PROMPT_DEPTH + 1)
        self.image_encoder = FrozenImageEncoder(width, cfg.TRAINER.MAPLE.PROMPT_DEPTH + 1)
        self.logit_scale = nn.Parameter(torch.tensor(4.6))

    def forward(self, image, label=None):
        prompts, shared_ctx, deep_text, deep_vision = self.prompt_learner()
        text_features = F.normalize(self.text_encoder(prompts, deep_text), dim=-1)
        image_features = F.normalize(self.image_encoder(image, shared_ctx, deep_vision), dim=-1)
        logits = self.logit_scale.exp() * image_features @ text_features.t()
        if self.prompt_learner.training:
            return F.cross_entropy(logits, label)
        return logits


class ReplicaParallel(nn.Module):
    """CPU stand-in for nn.DataParallel: scatter on dim 0, run replicas, gather on dim 0."""

    def __init__(self, module, num_replicas):
        super().__init__()
        self.module = module
        self.num_replicas = num_replicas

    def forward(self, *inputs):
        chunks = list(zip(*[x.chunk(self.num_replicas, dim=0) for x in inputs]))
        outputs = [self.module(*c) for c in chunks]
        if outputs[0].dim() == 0:
            return torch.stack(outputs)
        return torch.cat(outputs, dim=0)


class TrainerX:
    def __init__(self, cfg):
        self.cfg = cfg
        self.build_model()
        g = torch.Generator().manual_seed(0)
        self.train_loader_x = [(torch.randn(cfg.DATALOADER.BATCH_SIZE, 3, 16, 16, generator=g),
                                torch.randint(0, cfg.MODEL.N_CLS, (cfg.DATALOADER.BATCH_SIZE,), generator=g))
                               for _ in range(3)]

    def build_model(self):
        cfg = self.cfg
        self.model = CustomCLIP(cfg)
        name_to_update = "prompt_learner"
        for name, param in self.model.named_parameters():
            param.requires_grad_(name_to_update in name)
        enabled = sorted(n for n, p in self.model.named_parameters() if p.requires_grad)
        print("Parameters to be updated: %d tensors" % len(enabled))
        self.optim = torch.optim.SGD(self.model.prompt_learner.parameters(), lr=cfg.OPTIM.LR, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.optim, cfg.OPTIM.MAX_EPOCH)
        if cfg.DATALOADER.NUM_REPLICAS > 1:
            print("Multiple replicas detected (n_replicas=%d), use all of them!" % cfg.DATALOADER.NUM_REPLICAS)
            self.model = ReplicaParallel(self.model, cfg.DATALOADER.NUM_REPLICAS)

    def model_backward_and_update(self, loss):
        self.optim.zero_grad()
        loss.backward()  # raises
        self.optim.step()

    def forward_backward(self, batch):
        image, label = batch
        loss = self.model(image, label)
        self.model_backward_and_update(loss)
        return {"loss": loss.mean().item()}

    def set_model_mode(self, mode="train"):
        self.model.train(mode == "train")

    def update_lr(self, epoch):
        if epoch < self.cfg.OPTIM.WARMUP_EPOCH:
            for g in self.optim.param_groups:
                g["lr"] = self.cfg.OPTIM.WARMUP_CONS_LR
        else:
            self.sched.step()

    def run_epoch(self, epoch):
        self.set_model_mode("train")
        for i, batch in enumerate(self.train_loader_x):
            print("epoch [%d] batch [%d] %s" % (epoch, i, self.forward_backward(batch)))
        self.update_lr(epoch)

    def train(self):
        for epoch in range(self.cfg.OPTIM.MAX_EPOCH):
            self.run_epoch(epoch)


def main():
    torch.manual_seed(0)
    TrainerX(cfg).train()


if __name__ == "__main__":
    main()
