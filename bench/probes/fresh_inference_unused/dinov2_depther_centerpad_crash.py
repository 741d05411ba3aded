# expect: inference_tensor
# source: https://github.com/facebookresearch/dinov2/issues/472
import math
import itertools
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConfigDict(dict):
    def __getattr__(self, name):
        value = self[name]
        return ConfigDict(value) if isinstance(value, dict) else value


class PatchEmbed(nn.Module):
    def __init__(self, patch_size=14, in_chans=3, embed_dim=64):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)  # raises
        return x.flatten(2).transpose(1, 2)


class Block(nn.Module):
    def __init__(self, dim, num_heads=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class DinoVisionTransformer(nn.Module):
    def __init__(self, patch_size=14, embed_dim=64, depth=4, num_patches=16):
        super().__init__()
        self.patch_size = patch_size
        self.embed_dim = embed_dim
        self.patch_embed = PatchEmbed(patch_size, 3, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.blocks = nn.ModuleList([Block(embed_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)

    def interpolate_pos_encoding(self, x, w, h):
        npatch = x.shape[1] - 1
        N = self.pos_embed.shape[1] - 1
        if npatch == N:
            return self.pos_embed
        class_pos_embed, patch_pos_embed = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        M = int(math.sqrt(N))
        patch_pos_embed = F.interpolate(patch_pos_embed.reshape(1, M, M, -1).permute(0, 3, 1, 2),
                                        size=(h // self.patch_size, w // self.patch_size), mode="bicubic")
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).flatten(1, 2)
        return torch.cat((class_pos_embed, patch_pos_embed), dim=1)

    def prepare_tokens_with_masks(self, x):
        B, nc, w, h = x.shape
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        return x + self.interpolate_pos_encoding(x, w, h)

    def get_intermediate_layers(self, x, n=1, reshape=False, return_class_token=False, norm=True):
        tokens = self.prepare_tokens_with_masks(x)
        outputs, total_block_len = [], len(self.blocks)
        blocks_to_take = range(total_block_len - n, total_block_len) if isinstance(n, int) else n
        for i, blk in enumerate(self.blocks):
            tokens = blk(tokens)
            if i in blocks_to_take:
                outputs.append(tokens)
        if norm:
            outputs = [self.norm(out) for out in outputs]
        class_tokens = [out[:, 0] for out in outputs]
        outputs = [out[:, 1:] for out in outputs]
        if reshape:
            B, _, w, h = x.shape
            outputs = [out.reshape(B, w // self.patch_size, h // self.patch_size, -1).permute(0, 3, 1, 2).contiguous()
                       for out in outputs]
        if return_class_token:
            return tuple(zip(outputs, class_tokens))
        return tuple(outputs)

    def forward(self, x):
        return self.norm(self.blocks[-1](self.prepare_tokens_with_masks(x)))[:, 0]


class BNHead(nn.Module):
    def __init__(self, in_channels, n_layers, min_depth=0.001, max_depth=10.0):
        super().__init__()
        self.min_depth, self.max_depth = min_depth, max_depth
        self.bn = nn.BatchNorm2d(in_channels * 2 * n_layers)
        self.conv_depth = nn.Conv2d(in_channels * 2 * n_layers, 1, kernel_size=1)

    def forward(self, inputs, img_shape):
        feats = []
        for patch_tokens, cls_token in inputs:
            cls = cls_token[:, :, None, None].expand_as(patch_tokens)
            feats.append(torch.cat([patch_tokens, cls], dim=1))
        x = self.bn(torch.cat(feats, dim=1))
        depth = torch.sigmoid(self.conv_depth(x)) * (self.max_depth - self.min_depth) + self.min_depth
        return F.interpolate(depth, size=img_shape, mode="bilinear", align_corners=False)


class SigLoss(nn.Module):
    def __init__(self, valid_mask=True, loss_weight=1.0, max_depth=10.0):
        super().__init__()
        self.valid_mask, self.loss_weight, self.max_depth, self.eps = valid_mask, loss_weight, max_depth, 0.001

    def forward(self, depth_pred, depth_gt):
        mask = (depth_gt > 0) & (depth_gt <= self.max_depth)
        g = torch.log(depth_pred[mask] + self.eps) - torch.log(depth_gt[mask] + self.eps)
        return self.loss_weight * torch.sqrt(g.var() + 0.15 * g.mean() ** 2)


class DepthEncoderDecoder(nn.Module):
    def __init__(self, backbone, decode_head, train_cfg=None, test_cfg=None):
        super().__init__()
        self.backbone = backbone
        self.decode_head = decode_head
        self.loss_decode = SigLoss(max_depth=decode_head.max_depth)
        self.train_cfg, self.test_cfg = train_cfg, test_cfg

    def extract_feat(self, img):
        return self.backbone(img)

    def forward_train(self, img, img_metas, depth_gt):
        x = self.extract_feat(img)
        depth_pred = self.decode_head(x, img.shape[2:])
        return {"decode.loss_depth": self.loss_decode(depth_pred, depth_gt)}

    def forward(self, img, img_metas=None, return_loss=True, **kwargs):
        if return_loss:
            return self.forward_train(img, img_metas, **kwargs)
        return self.decode_head(self.extract_feat(img), img.shape[2:])


def build_depther(model_cfg, train_cfg=None, test_cfg=None):
    head = BNHead(model_cfg.decode_head.channels, len(model_cfg.backbone.out_indices),
                  max_depth=model_cfg.decode_head.max_depth)
    return DepthEncoderDecoder(nn.Module(), head, train_cfg, test_cfg)


class CenterPadding(torch.nn.Module):
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


def create_depther(cfg, backbone_model, backbone_size, head_type):
    train_cfg = cfg.get("train_cfg")
    test_cfg = cfg.get("test_cfg")
    depther = build_depther(cfg.model, train_cfg=train_cfg, test_cfg=test_cfg)

    depther.backbone.forward = partial(
        backbone_model.get_intermediate_layers,
        n=cfg.model.backbone.out_indices,
        reshape=True,
        return_class_token=cfg.model.backbone.output_cls_token,
        norm=cfg.model.backbone.final_norm,
    )

    if hasattr(backbone_model, "patch_size"):
        depther.backbone.register_forward_pre_hook(lambda _, x: CenterPadding(backbone_model.patch_size)(x[0]))

    return depther


torch.manual_seed(0)
BACKBONE_SIZE, HEAD_TYPE = "small", "linear4"
cfg = ConfigDict(model=dict(backbone=dict(out_indices=[0, 1, 2, 3], output_cls_token=True, final_norm=False),
                            decode_head=dict(channels=64, max_depth=10.0)),
                 train_cfg=None, test_cfg=dict(mode="whole"))
backbone_model = DinoVisionTransformer()
model = create_depther(cfg, backbone_model=backbone_model, backbone_size=BACKBONE_SIZE, head_type=HEAD_TYPE)

optimizer = torch.optim.AdamW(model.decode_head.parameters(), lr=1e-4)
train_loader = [{"image": torch.randn(2, 3, 50, 54), "depth": torch.rand(2, 1, 50, 54) * 9 + 0.5} for _ in range(3)]
num_epochs = 2

model.backbone.train()
model.train()
backbone_model.train()

for epoch in range(num_epochs):
    model.train()
    for batch in train_loader:
        images = batch['image']
        depths = batch['depth']
        losses = model(images, img_metas=None, depth_gt=depths, return_loss=True)
        loss = sum(losses.values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
