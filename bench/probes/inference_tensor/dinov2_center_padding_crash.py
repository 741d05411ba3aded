# expect: inference_tensor
# source: https://github.com/facebookresearch/dinov2/issues/399
import itertools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class CenterPadding(nn.Module):
    def __init__(self, multiple):
        super().__init__()
        self.multiple = multiple

    def _get_pad(self, size):
        new_size = math.ceil(size / self.multiple) * self.multiple
        pad_size = new_size - size
        pad_size_left = pad_size // 2
        pad_size_right = pad_size - pad_size_left
        return pad_size_left, pad_size_right

    @torch.inference_mode()
    def forward(self, x):
        pads = list(itertools.chain.from_iterable(self._get_pad(m) for m in x.shape[:1:-1]))
        output = F.pad(x, pads)
        return output


class TinyViT(nn.Module):
    def __init__(self, patch_size=14, embed_dim=48):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, embed_dim * 2), nn.GELU(), nn.Linear(embed_dim * 2, embed_dim))

    def forward(self, x):
        x = self.patch_embed(x)  # raises
        b, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        tokens = tokens + self.mlp(self.norm(tokens))
        return tokens.transpose(1, 2).reshape(b, c, h, w)


class DepthHead(nn.Module):
    def __init__(self, embed_dim=48):
        super().__init__()
        self.conv = nn.Conv2d(embed_dim, 1, kernel_size=1)

    def forward(self, feats, out_size):
        depth = self.conv(feats)
        depth = F.interpolate(depth, size=out_size, mode="bilinear", align_corners=False)
        return F.softplus(depth)


backbone = TinyViT()
backbone.register_forward_pre_hook(lambda _, x: CenterPadding(backbone.patch_embed.stride[0])(x[0]))
head = DepthHead()

params = list(backbone.parameters()) + list(head.parameters())
optimizer = torch.optim.AdamW(params, lr=1e-4)

images = torch.rand(2, 3, 50, 64)
depth_gt = torch.rand(2, 1, 50, 64) * 10

for step in range(3):
    feats = backbone(images)
    pred = head(feats, images.shape[-2:])
    loss = F.l1_loss(pred, depth_gt)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
