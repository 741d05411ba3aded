# expect: clean
# source: https://github.com/huggingface/pytorch-image-models/issues/265
"""AND-mask training ("Learning explanations that are hard to vary") with a hybrid ResNet+ViT."""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Args:
    img_size: int = 32
    embed_dim: int = 48
    depth: int = 2
    num_heads: int = 4
    num_classes: int = 2
    n_agreement_envs: int = 3
    batch_size: int = 8
    agreement_threshold: float = 0.5
    lr: float = 1e-3
    weight_decay: float = 1e-4
    epochs: int = 2
    seed: int = 0


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        sc = x if self.down is None else self.down(x)
        x = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(x)) + sc)


class ResNet18d(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.layer3 = BasicBlock(32, 64, 2)
        self.num_features = 64
        self.fc = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x):
        return self.layer3(self.layer2(self.layer1(self.stem(x))))

    def forward(self, x):
        return self.fc(self.forward_features(x).mean((2, 3)))


class HybridEmbed(nn.Module):
    def __init__(self, backbone, embed_dim):
        super().__init__()
        self.backbone = backbone
        self.proj = nn.Linear(backbone.num_features, embed_dim)

    def forward(self, x):
        x = self.backbone.forward_features(x)
        return self.proj(x.flatten(2).transpose(1, 2))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, args, hybrid_backbone):
        super().__init__()
        self.patch_embed = HybridEmbed(hybrid_backbone, args.embed_dim)
        n_patches = (args.img_size // 4) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, args.embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n_patches + 1, args.embed_dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(args.embed_dim, args.num_heads) for _ in range(args.depth)])
        self.norm = nn.LayerNorm(args.embed_dim)
        self.head = nn.Linear(args.embed_dim, args.num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit_small_resnet18d_224(args):
    backbone = ResNet18d()
    return VisionTransformer(args, hybrid_backbone=backbone)


def get_grads(agreement_threshold, batch_size, loss_fn, n_agreement_envs, params, output, target):
    param_gradients = [[] for _ in params]
    outputs = output.view(n_agreement_envs, batch_size, -1)
    targets = target.view(n_agreement_envs, batch_size)

    total_loss = 0.0
    for env_outputs, env_targets in zip(outputs, targets):
        env_loss = loss_fn(env_outputs, env_targets)
        total_loss += env_loss
        env_grads = torch.autograd.grad(env_loss, params, retain_graph=True)
        for grads, env_grad in zip(param_gradients, env_grads):
            grads.append(env_grad)
    mean_loss = total_loss / n_agreement_envs
    masks = []
    for param, grads in zip(params, param_gradients):
        grads = torch.stack(grads, dim=0)
        grad_signs = torch.sign(grads)
        mask = torch.mean(grad_signs, dim=0).abs() >= agreement_threshold
        mask = mask.to(torch.float32)
        avg_grad = torch.mean(grads, dim=0)
        masks.append(mask)
        param.grad = mask * avg_grad
        param.grad *= 1.0 / (1e-10 + mask.mean())
    return mean_loss, masks


def make_env_batches(args, rng):
    xs, ys = [], []
    for env in range(args.n_agreement_envs):
        y = rng.integers(0, args.num_classes, size=args.batch_size)
        x = rng.normal(size=(args.batch_size, 3, args.img_size, args.img_size)).astype(np.float32)
        x[:, env % 3] += y[:, None, None] * 0.5
        xs.append(x)
        ys.append(y)
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys)).long()


def train(args):
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = vit_small_resnet18d_224(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    params = [p for n, p in model.named_parameters() if not n.startswith("patch_embed.backbone.fc.")]
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        model.train()
        data, target = make_env_batches(args, rng)
        optimizer.zero_grad()
        output = model(data)
        mean_loss, masks = get_grads(args.agreement_threshold, args.batch_size, loss_fn,
                                     args.n_agreement_envs, params, output, target)
        optimizer.step()
        kept = torch.cat([m.flatten() for m in masks]).mean().item()
        print(f"epoch {epoch}: loss={mean_loss.item():.4f} mask_kept={kept:.3f}")


if __name__ == "__main__":
    train(Args())
