# expect: inference_tensor
# source: https://github.com/open-mmlab/mmsegmentation/issues/3499
"""Semantic segmentation with a DINOv2 ViT backbone fine-tuned in an mmseg-style runner.

The config is a nested dict as in mmsegmentation (`model`, `optim_wrapper`
with a backbone lr multiplier, `param_scheduler`, `train_cfg`); modules are
built through a small registry.  The `Dino` backbone wraps a
DinoVisionTransformer the way the DINOv2 hub code does: `forward` is bound to
`get_intermediate_layers` and a forward pre-hook pads the input to a multiple
of the patch size with `CenterPadding`.  A BN linear head is trained on top,
with a warm-up + poly schedule and logger hooks.  Synthetic images and masks,
CPU.
"""
import itertools
import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = dict(
    model=dict(
        type='EncoderDecoder',
        data_preprocessor=dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]),
        backbone=dict(type='Dino', arch='dinov2_vitb14', embed_dim=32, depth=2, num_heads=4,
                      patch_size=14, out_indices=[0, 1]),
        decode_head=dict(type='BNHead', in_channels=[32, 32], channels=64, num_classes=19),
    ),
    optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.01),
                       paramwise_cfg=dict(custom_keys={'backbone': dict(lr_mult=0.1)})),
    param_scheduler=[dict(type='LinearLR', start_factor=0.1, end=2),
                     dict(type='PolyLR', power=1.0, begin=2, end=6)],
    train_cfg=dict(max_iters=6, val_interval=3),
    default_hooks=dict(logger=dict(interval=1)),
    image_size=(30, 44), batch_size=2, seed=0,
)


class Registry:
    def __init__(self, name):
        self.name, self._modules = name, {}

    def register_module(self):
        def _register(cls):
            self._modules[cls.__name__] = cls
            return cls
        return _register

    def build(self, cfg):
        args = dict(cfg)
        return self._modules[args.pop('type')](**args)


MODELS = Registry('model')


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


class PatchEmbed(nn.Module):
    def __init__(self, patch_size, embed_dim):
        super().__init__()
        self.proj = nn.Conv2d(3, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)  # raises
        return x


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class DinoVisionTransformer(nn.Module):
    def __init__(self, patch_size=14, embed_dim=32, depth=2, num_heads=4):
        super().__init__()
        self.patch_size = patch_size
        self.patch_embed = PatchEmbed(patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + 16, embed_dim) * 0.02)
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim)

    def interpolate_pos_encoding(self, n_patches, h, w):
        pos = self.pos_embed[:, 1:].reshape(1, 4, 4, -1).permute(0, 3, 1, 2)
        pos = F.interpolate(pos, size=(h, w), mode='bicubic', align_corners=False)
        return torch.cat([self.pos_embed[:, :1], pos.flatten(2).transpose(1, 2)], dim=1)

    def prepare_tokens(self, x):
        x = self.patch_embed(x)
        h, w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.interpolate_pos_encoding(h * w, h, w), (h, w)

    def get_intermediate_layers(self, x, n=(0,), reshape=False, norm=True):
        x, (h, w) = self.prepare_tokens(x)
        outputs = []
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if i in n:
                outputs.append(self.norm(x) if norm else x)
        outputs = [out[:, 1:] for out in outputs]
        if reshape:
            outputs = [out.reshape(x.shape[0], h, w, -1).permute(0, 3, 1, 2).contiguous() for out in outputs]
        return tuple(outputs)


@MODELS.register_module()
class Dino(nn.Module):
    def __init__(self, arch, embed_dim, depth, num_heads, patch_size, out_indices):
        super().__init__()
        self.arch = arch
        vit = DinoVisionTransformer(patch_size, embed_dim, depth, num_heads)
        vit.forward = partial(vit.get_intermediate_layers, n=out_indices, reshape=True)
        vit.register_forward_pre_hook(lambda _, x: CenterPadding(vit.patch_size)(x[0]))
        self.dino = vit

    def forward(self, x):
        return list(self.dino(x))


@MODELS.register_module()
class BNHead(nn.Module):
    def __init__(self, in_channels, channels, num_classes):
        super().__init__()
        self.bn = nn.BatchNorm2d(sum(in_channels))
        self.conv_seg = nn.Conv2d(sum(in_channels), num_classes, 1)
        self.num_classes = num_classes

    def forward(self, feats):
        x = torch.cat(feats, dim=1)
        return self.conv_seg(self.bn(x))


@MODELS.register_module()
class EncoderDecoder(nn.Module):
    def __init__(self, data_preprocessor, backbone, decode_head):
        super().__init__()
        self.register_buffer('mean', torch.tensor(data_preprocessor['mean']).view(1, 3, 1, 1))
        self.register_buffer('std', torch.tensor(data_preprocessor['std']).view(1, 3, 1, 1))
        self.backbone = MODELS.build(backbone)
        self.decode_head = MODELS.build(decode_head)

    def extract_feat(self, inputs):
        return self.backbone((inputs - self.mean) / self.std)

    def _decode(self, inputs):
        logits = self.decode_head(self.extract_feat(inputs))
        return F.interpolate(logits, size=inputs.shape[-2:], mode='bilinear', align_corners=False)

    def loss(self, inputs, gt_sem_seg):
        return {'decode.loss_ce': F.cross_entropy(self._decode(inputs), gt_sem_seg, ignore_index=255)}

    @torch.no_grad()
    def predict(self, inputs):
        return self._decode(inputs).argmax(1)


def build_optim_wrapper(model, optim_cfg):
    base = dict(optim_cfg['optimizer'])
    base.pop('type')
    groups = []
    for key, mult in optim_cfg['paramwise_cfg']['custom_keys'].items():
        params = [p for n, p in model.named_parameters() if n.startswith(key)]
        groups.append({'params': params, 'lr': base['lr'] * mult['lr_mult']})
    rest = [p for n, p in model.named_parameters() if not any(n.startswith(k) for k in optim_cfg['paramwise_cfg']['custom_keys'])]
    groups.append({'params': rest})
    return torch.optim.AdamW(groups, **base)


def build_scheduler(optimizer, sched_cfgs, max_iters):
    warm, poly = sched_cfgs

    def factor(it):
        if it < warm['end']:
            return warm['start_factor'] + (1 - warm['start_factor']) * it / warm['end']
        return (1 - (it - poly['begin']) / (poly['end'] - poly['begin'] + 1)) ** poly['power']
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class LoggerHook:
    def __init__(self, interval):
        self.interval = interval

    def after_train_iter(self, runner, it, outputs):
        if it % self.interval == 0:
            print(f"Iter(train) [{it}/{runner.max_iters}] lr: {runner.lr:.2e} loss: {outputs['loss']:.4f}")


class Runner:
    def __init__(self, cfg):
        torch.manual_seed(cfg['seed'])
        self.cfg = cfg
        self.model = MODELS.build(cfg['model'])
        self.optimizer = build_optim_wrapper(self.model, cfg['optim_wrapper'])
        self.max_iters = cfg['train_cfg']['max_iters']
        self.scheduler = build_scheduler(self.optimizer, cfg['param_scheduler'], self.max_iters)
        self.hooks = [LoggerHook(**cfg['default_hooks']['logger'])]
        self.gen = torch.Generator().manual_seed(cfg['seed'])

    @property
    def lr(self):
        return self.optimizer.param_groups[-1]['lr']

    def _batch(self):
        h, w = self.cfg['image_size']
        inputs = torch.rand(self.cfg['batch_size'], 3, h, w, generator=self.gen) * 255
        gt = torch.randint(0, 19, (self.cfg['batch_size'], h, w), generator=self.gen)
        return inputs, gt

    def train_step(self, inputs, gt):
        self.model.train()
        losses = self.model.loss(inputs, gt)
        loss = sum(losses.values())
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return {'loss': loss.item()}

    def val(self):
        self.model.eval()
        inputs, gt = self._batch()
        pred = self.model.predict(inputs)
        return (pred == gt).float().mean().item()

    def train(self):
        for it in range(1, self.max_iters + 1):
            outputs = self.train_step(*self._batch())
            for hook in self.hooks:
                hook.after_train_iter(self, it, outputs)
            if it % self.cfg['train_cfg']['val_interval'] == 0:
                print(f"Iter(val) [{it}] aAcc: {self.val():.4f}")


def main():
    Runner(cfg).train()


if __name__ == "__main__":
    main()
