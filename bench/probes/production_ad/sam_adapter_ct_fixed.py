# expect: clean
# source: https://github.com/mazurowski-lab/finetune-SAM/issues/26
"""Fine-tuning a Segment-Anything-style model for multi-organ CT segmentation.

Follows the layout of a SAM fine-tuning script for medical images: a config
namespace (cfg.parse_args), a model registry, a ViT image encoder and a mask
decoder that can each carry bottleneck Adapter layers, a prompt encoder used in
no-prompt mode, three fine-tuning strategies (vanilla / adapter / lora), Dice +
cross-entropy loss, warmup then poly learning-rate decay and an evaluation pass
with multi-class Dice every other epoch.  Images and masks are synthetic.
"""
import argparse
import math

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument('-arch', default='vit_t')
    p.add_argument('-finetune_type', default='adapter')
    p.add_argument('-if_update_encoder', type=bool, default=False)
    p.add_argument('-if_encoder_adapter', type=bool, default=True)
    p.add_argument('-if_mask_decoder_adapter', type=bool, default=False)
    p.add_argument('-encoder_adapter_depths', type=list, default=[0, 1])
    p.add_argument('-num_cls', type=int, default=4)
    p.add_argument('-image_size', type=int, default=64)
    p.add_argument('-out_size', type=int, default=32)
    p.add_argument('-b', type=int, default=2)
    p.add_argument('-lr', type=float, default=1e-4)
    p.add_argument('-if_warmup', type=bool, default=True)
    p.add_argument('-warmup_period', type=int, default=3)
    p.add_argument('-epochs', type=int, default=2)
    return p.parse_args([])


args = parse_args()


class Adapter(nn.Module):
    def __init__(self, dim, ratio=0.25, skip_connect=True):
        super().__init__()
        hidden = int(dim * ratio)
        self.skip_connect = skip_connect
        self.act = nn.GELU()
        self.D_fc1 = nn.Linear(dim, hidden)
        self.D_fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        xs = self.D_fc2(self.act(self.D_fc1(x)))
        return x + xs if self.skip_connect else xs


class Block(nn.Module):
    def __init__(self, dim, heads, use_adapter):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
        self.Space_Adapter = Adapter(dim) if use_adapter else None
        self.MLP_Adapter = Adapter(dim, skip_connect=False) if use_adapter else None

    def forward(self, x):
        h = self.norm1(x)
        h, _ = self.attn(h, h, h)
        if self.Space_Adapter is not None:
            h = self.Space_Adapter(h)
        x = x + h
        xn = self.norm2(x)
        x = x + self.mlp(xn)
        if self.MLP_Adapter is not None:
            x = x + 0.5 * self.MLP_Adapter(xn)
        return x


class ImageEncoderViT(nn.Module):
    def __init__(self, args, img_size=64, patch=8, dim=32, depth=2, out_chans=32):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, patch, stride=patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch) ** 2, dim))
        self.blocks = nn.ModuleList([
            Block(dim, 4, args.if_encoder_adapter and i in args.encoder_adapter_depths)
            for i in range(depth)])
        self.neck = nn.Sequential(nn.Conv2d(dim, out_chans, 1), nn.GroupNorm(1, out_chans))
        self.grid = img_size // patch

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        x = x.transpose(1, 2).reshape(x.shape[0], -1, self.grid, self.grid)
        return self.neck(x)


class PromptEncoder(nn.Module):
    def __init__(self, embed_dim=32, grid=8):
        super().__init__()
        self.no_mask_embed = nn.Embedding(1, embed_dim)
        self.pe = nn.Parameter(torch.randn(1, embed_dim, grid, grid) * 0.02)
        self.embed_dim, self.grid = embed_dim, grid

    def get_dense_pe(self):
        return self.pe

    def forward(self, points=None, boxes=None, masks=None, batch_size=1):
        sparse = torch.empty((batch_size, 0, self.embed_dim))
        dense = self.no_mask_embed.weight.reshape(1, -1, 1, 1).expand(
            batch_size, -1, self.grid, self.grid)
        return sparse, dense


class MaskDecoder(nn.Module):
    def __init__(self, args, dim=32, num_classes=4):
        super().__init__()
        self.transformer = nn.TransformerEncoderLayer(dim, 4, dim * 2, batch_first=True)
        self.Adapter = Adapter(dim) if args.if_mask_decoder_adapter else None
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 2, 2, stride=2), nn.GELU(),
            nn.ConvTranspose2d(dim // 2, dim // 4, 2, stride=2), nn.GELU())
        self.cls_head = nn.Conv2d(dim // 4, num_classes, 1)
        self.iou_head = nn.Linear(dim, num_classes)

    def forward(self, image_embeddings, image_pe, sparse_prompt_embeddings,
                dense_prompt_embeddings, multimask_output=True):
        src = image_embeddings + dense_prompt_embeddings + image_pe
        b, c, h, w = src.shape
        tokens = self.transformer(src.flatten(2).transpose(1, 2))
        if self.Adapter is not None:
            tokens = self.Adapter(tokens)
        src = tokens.transpose(1, 2).reshape(b, c, h, w)
        masks = self.cls_head(self.output_upscaling(src))
        iou_pred = self.iou_head(tokens.mean(1))
        return masks, iou_pred


class Sam(nn.Module):
    def __init__(self, args, num_classes):
        super().__init__()
        self.image_encoder = ImageEncoderViT(args, img_size=args.image_size)
        self.prompt_encoder = PromptEncoder(grid=args.image_size // 8)
        self.mask_decoder = MaskDecoder(args, num_classes=num_classes)


def build_sam_vit_t(args, checkpoint=None, num_classes=4):
    sam = Sam(args, num_classes)
    if checkpoint is not None:
        sam.load_state_dict(checkpoint, strict=False)
    return sam


sam_model_registry = {'vit_t': build_sam_vit_t}


class DiceLoss(nn.Module):
    """Soft Dice on sigmoid outputs against one-hot targets (monai-style)."""

    def __init__(self, num_classes, squared_pred=True, smooth=1e-5):
        super().__init__()
        self.num_classes, self.squared_pred, self.smooth = num_classes, squared_pred, smooth

    def forward(self, logits, target):
        probs = torch.sigmoid(logits)
        onehot = F.one_hot(target.long().squeeze(1), self.num_classes).permute(0, 3, 1, 2).float()
        inter = (probs * onehot).sum((2, 3))
        denom = (probs ** 2).sum((2, 3)) + (onehot ** 2).sum((2, 3)) if self.squared_pred \
            else probs.sum((2, 3)) + onehot.sum((2, 3))
        return (1 - (2 * inter + self.smooth) / (denom + self.smooth)).mean()


def dice_coeff_multi_class(pred, target, num_classes):
    scores = []
    for c in range(1, num_classes):
        p, t = (pred == c).float(), (target == c).float()
        scores.append(((2 * (p * t).sum() + 1e-5) / (p.sum() + t.sum() + 1e-5)).item())
    return float(np.mean(scores))


def synthetic_ct(n, size, num_cls, seed):
    g = torch.Generator().manual_seed(seed)
    imgs = torch.randn(n, 1, size, size, generator=g) * 0.1
    msks = torch.zeros(n, 1, size, size, dtype=torch.long)
    for i in range(n):
        for c in range(1, num_cls):
            cx, cy = torch.randint(8, size - 8, (2,), generator=g).tolist()
            msks[i, 0, cy - 5:cy + 5, cx - 5:cx + 5] = c
            imgs[i, 0, cy - 5:cy + 5, cx - 5:cx + 5] += 0.3 * c
    return [{'image': imgs[i:i + args.b], 'mask': msks[i:i + args.b]} for i in range(0, n, args.b)]


def run_decoder(sam, img_emb):
    sparse_emb, dense_emb = sam.prompt_encoder(points=None, boxes=None, masks=None,
                                               batch_size=img_emb.shape[0])
    pred, _ = sam.mask_decoder(image_embeddings=img_emb, image_pe=sam.prompt_encoder.get_dense_pe(),
                               sparse_prompt_embeddings=sparse_emb,
                               dense_prompt_embeddings=dense_emb, multimask_output=True)
    return pred


def train_model(trainloader, valloader, epochs):
    b_lr = args.lr / args.warmup_period if args.if_warmup else args.lr
    sam = sam_model_registry[args.arch](args, checkpoint=None, num_classes=args.num_cls)
    if args.finetune_type == 'adapter':
        for n, value in sam.named_parameters():
            if "Adapter" not in n:  # only update parameters in adapter
                value.requires_grad = False
    elif args.finetune_type == 'vanilla' and args.if_update_encoder == False:
        for n, value in sam.image_encoder.named_parameters():
            value.requires_grad = False

    optimizer = torch.optim.AdamW(sam.parameters(), lr=b_lr, betas=(0.9, 0.999), eps=1e-08,
                                  weight_decay=0.1, amsgrad=False)
    optimizer.zero_grad()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    criterion1 = DiceLoss(args.num_cls)
    criterion2 = nn.CrossEntropyLoss()

    iter_num, max_iterations = 0, epochs * len(trainloader)
    val_largest_dsc = 0
    for epoch in range(epochs):
        sam.train()
        train_loss = 0
        for i, data in enumerate(trainloader):
            imgs = data['image']
            msks = F.interpolate(data['mask'].float(), size=(args.out_size, args.out_size),
                                 mode='nearest')
            if args.if_update_encoder or (args.finetune_type == 'adapter' and args.if_encoder_adapter):
                img_emb = sam.image_encoder(imgs)
            else:
                with torch.no_grad():
                    img_emb = sam.image_encoder(imgs)
            pred = run_decoder(sam, img_emb)
            loss_dice = criterion1(pred, msks.float())
            loss_ce = criterion2(pred, torch.squeeze(msks.long(), 1))
            loss = loss_dice + loss_ce
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            if args.if_warmup and iter_num < args.warmup_period:
                lr_ = args.lr * ((iter_num + 1) / args.warmup_period)
            else:
                shift_iter = iter_num - args.warmup_period if args.if_warmup else iter_num
                lr_ = args.lr * (1.0 - shift_iter / max_iterations) ** 0.9
            for param_group in optimizer.param_groups:
                param_group['lr'] = lr_
            train_loss += loss.item()
            iter_num += 1
        scheduler.step()
        train_loss /= (i + 1)

        if epoch % 2 == 0:
            sam.eval()
            dsc = 0
            with torch.no_grad():
                for j, data in enumerate(valloader):
                    pred = run_decoder(sam, sam.image_encoder(data['image']))
                    target = F.interpolate(data['mask'].float(), size=(args.out_size, args.out_size),
                                           mode='nearest').squeeze(1).long()
                    dsc += dice_coeff_multi_class(pred.argmax(dim=1), target, args.num_cls)
            dsc /= (j + 1)
            val_largest_dsc = max(val_largest_dsc, dsc)
            print('Epoch {} | train loss {:.4f} | dsc {:.4f}'.format(epoch, train_loss, dsc))
    return val_largest_dsc


if __name__ == "__main__":
    torch.manual_seed(0)
    trainloader = synthetic_ct(6, args.image_size, args.num_cls, seed=1)
    valloader = synthetic_ct(2, args.image_size, args.num_cls, seed=2)
    print('best dsc', train_model(trainloader, valloader, args.epochs))
