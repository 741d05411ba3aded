# expect: inplace_version
# source: https://github.com/fepegar/unet/pull/37
"""3D U-Net brain-lesion segmentation in the style of the `unet` package.

The network is assembled from ConvolutionalBlock / EncodingBlock /
DecodingBlock modules whose options (normalisation, pre-activation,
residual connections, padding, upsampling type) come from a dataclass config,
as in fepegar/unet.  A Trainer runs soft-Dice training with AdamW, a
ReduceLROnPlateau schedule and an early-stopping callback, and validates with
the hard Dice score.  Data are synthetic MRI-like volumes with spherical lesions.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

CHANNELS_DIMENSION = 1


class ConvolutionalBlock(nn.Module):
    def __init__(self, dimensions, in_channels, out_channels, normalization: Optional[str] = None,
                 kernel_size=3, activation: Optional[str] = "ReLU", preactivation=False, padding=False,
                 dropout=0.0):
        super().__init__()
        block = nn.ModuleList()
        padding = (kernel_size - 1) // 2 if padding else 0
        conv_layer = getattr(nn, "Conv{}d".format(dimensions))(in_channels, out_channels, kernel_size, padding=padding)
        norm_layer = None
        if normalization is not None:
            norm_class = getattr(nn, "{}Norm{}d".format(normalization.capitalize(), dimensions))
            norm_layer = norm_class(in_channels if preactivation else out_channels)
        activation_layer = getattr(nn, activation)() if activation is not None else None
        order = (norm_layer, activation_layer, conv_layer) if preactivation else (conv_layer, norm_layer, activation_layer)
        for module in order:
            self.add_if_not_none(block, module)
        if dropout:
            self.add_if_not_none(block, getattr(nn, "Dropout{}d".format(dimensions))(p=dropout))
        self.conv_layer = conv_layer
        self.block = nn.Sequential(*block)

    def forward(self, x):
        return self.block(x)

    @staticmethod
    def add_if_not_none(module_list, module):
        if module is not None:
            module_list.append(module)


class EncodingBlock(nn.Module):
    def __init__(self, in_channels, out_channels_first, dimensions, normalization, pooling_type,
                 preactivation=False, is_first_block=False, residual=False, padding=False, dropout=0.0):
        super().__init__()
        self.residual = residual
        first_norm = None if is_first_block else normalization
        first_pre = False if is_first_block else preactivation
        self.conv1 = ConvolutionalBlock(dimensions, in_channels, out_channels_first, normalization=first_norm,
                                        preactivation=first_pre, padding=padding, dropout=dropout)
        out_channels_second = 2 * out_channels_first if dimensions == 3 else out_channels_first
        self.conv2 = ConvolutionalBlock(dimensions, out_channels_first, out_channels_second,
                                        normalization=normalization, preactivation=preactivation,
                                        padding=padding, dropout=dropout)
        if residual:
            self.conv_residual = ConvolutionalBlock(dimensions, in_channels, out_channels_second, kernel_size=1,
                                                    normalization=None, activation=None)
        self.downsample = None
        if pooling_type is not None:
            self.downsample = getattr(nn, "{}Pool{}d".format(pooling_type.capitalize(), dimensions))(2)

    def forward(self, x):
        if self.residual:
            connection = self.conv_residual(x)
            x = self.conv1(x)
            x = self.conv2(x)
            x += connection
        else:
            x = self.conv1(x)
            x = self.conv2(x)
        if self.downsample is None:
            return x
        skip_connection = x
        return self.downsample(x), skip_connection

    @property
    def out_channels(self):
        return self.conv2.conv_layer.out_channels


class DecodingBlock(nn.Module):
    def __init__(self, in_channels_skip_connection, dimensions, upsampling_type, normalization,
                 preactivation=False, residual=False, padding=False, dropout=0.0):
        super().__init__()
        self.residual = residual
        self.upsample = nn.Upsample(scale_factor=2, mode=upsampling_type)
        in_channels_first = in_channels_skip_connection * 3
        out_channels = in_channels_skip_connection
        self.conv1 = ConvolutionalBlock(dimensions, in_channels_first, out_channels, normalization=normalization,
                                        preactivation=preactivation, padding=padding, dropout=dropout)
        self.conv2 = ConvolutionalBlock(dimensions, out_channels, out_channels, normalization=normalization,
                                        preactivation=preactivation, padding=padding, dropout=dropout)
        if residual:
            self.conv_residual = ConvolutionalBlock(dimensions, in_channels_first, out_channels, kernel_size=1,
                                                    normalization=None, activation=None)

    def forward(self, skip_connection, x):
        x = self.upsample(x)
        x = torch.cat((skip_connection, x), dim=CHANNELS_DIMENSION)
        if self.residual:
            connection = self.conv_residual(x)
            x = self.conv1(x)
            x = self.conv2(x)
            x += connection
        else:
            x = self.conv1(x)
            x = self.conv2(x)
        return x


@dataclass
class UNetConfig:
    in_channels: int = 1
    out_classes: int = 2
    dimensions: int = 3
    num_encoding_blocks: int = 3
    out_channels_first_layer: int = 4
    normalization: Optional[str] = "batch"
    pooling_type: str = "max"
    upsampling_type: str = "trilinear"
    preactivation: bool = False
    residual: bool = True
    padding: bool = True
    dropout: float = 0.0


class UNet(nn.Module):
    def __init__(self, cfg: UNetConfig):
        super().__init__()
        depth = cfg.num_encoding_blocks - 1
        self.encoding_blocks = nn.ModuleList()
        in_channels, out_first = cfg.in_channels, cfg.out_channels_first_layer
        for i in range(depth):
            block = EncodingBlock(in_channels, out_first, cfg.dimensions, cfg.normalization, cfg.pooling_type,
                                  cfg.preactivation, is_first_block=(i == 0), residual=cfg.residual,
                                  padding=cfg.padding, dropout=cfg.dropout)
            self.encoding_blocks.append(block)
            in_channels = 2 * out_first
            out_first = in_channels
        self.bottom_block = EncodingBlock(in_channels, out_first, cfg.dimensions, cfg.normalization, None,
                                          cfg.preactivation, residual=cfg.residual, padding=cfg.padding,
                                          dropout=cfg.dropout)
        skip_channels = self.encoding_blocks[-1].out_channels
        self.decoding_blocks = nn.ModuleList()
        for _ in range(depth):
            self.decoding_blocks.append(DecodingBlock(skip_channels, cfg.dimensions, cfg.upsampling_type,
                                                      cfg.normalization, cfg.preactivation, cfg.residual,
                                                      cfg.padding, cfg.dropout))
            skip_channels //= 2
        self.classifier = ConvolutionalBlock(cfg.dimensions, 2 * cfg.out_channels_first_layer, cfg.out_classes,
                                             kernel_size=1, activation=None)

    def forward(self, x):
        skip_connections = []
        for block in self.encoding_blocks:
            x, skip = block(x)
            skip_connections.append(skip)
        x = self.bottom_block(x)
        for skip, block in zip(reversed(skip_connections), self.decoding_blocks):
            x = block(skip, x)
        return self.classifier(x)


def soft_dice_loss(logits, target, eps=1e-5):
    probs = F.softmax(logits, dim=CHANNELS_DIMENSION)
    onehot = F.one_hot(target, probs.shape[1]).permute(0, 4, 1, 2, 3).float()
    dims = (0, 2, 3, 4)
    intersection = (probs * onehot).sum(dims)
    denom = probs.sum(dims) + onehot.sum(dims)
    return 1 - ((2 * intersection + eps) / (denom + eps))[1:].mean()


def hard_dice(logits, target):
    pred = logits.argmax(CHANNELS_DIMENSION)
    inter = ((pred == 1) & (target == 1)).sum().item()
    return 2 * inter / max(1, (pred == 1).sum().item() + (target == 1).sum().item())


class EarlyStopping:
    def __init__(self, patience=3):
        self.patience, self.best, self.bad = patience, -1.0, 0

    def __call__(self, score):
        if score > self.best:
            self.best, self.bad = score, 0
        else:
            self.bad += 1
        return self.bad >= self.patience


@dataclass
class TrainConfig:
    epochs: int = 2
    batch_size: int = 2
    lr: float = 1e-3
    weight_decay: float = 1e-4
    model: UNetConfig = field(default_factory=UNetConfig)


class Trainer:
    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.model = UNet(cfg.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, mode="max", patience=1)
        self.early_stopping = EarlyStopping()

    def train_step(self, image, label):
        self.model.train()
        self.optimizer.zero_grad()
        loss = soft_dice_loss(self.model(image), label)
        loss.backward()  # raises
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        return sum(hard_dice(self.model(img), lbl) for img, lbl in batches) / len(batches)

    def fit(self, train_batches, val_batches):
        for epoch in range(self.cfg.epochs):
            losses = [self.train_step(img, lbl) for img, lbl in train_batches]
            dice = self.evaluate(val_batches)
            self.scheduler.step(dice)
            print("epoch %d  loss %.4f  val dice %.4f" % (epoch, sum(losses) / len(losses), dice))
            if self.early_stopping(dice):
                break


def synthetic_volumes(n, size=12, batch_size=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    grid = torch.stack(torch.meshgrid(*[torch.arange(size)] * 3, indexing="ij")).float()
    batches = []
    for _ in range(n):
        imgs, lbls = [], []
        for _ in range(batch_size):
            center = torch.randint(4, size - 4, (3,), generator=g).float().view(3, 1, 1, 1)
            radius = 2 + 2 * torch.rand(1, generator=g)
            lesion = ((grid - center) ** 2).sum(0).sqrt() < radius
            img = 0.3 * torch.randn(1, size, size, size, generator=g) + lesion.float()
            imgs.append(img)
            lbls.append(lesion.long())
        batches.append((torch.stack(imgs), torch.stack(lbls)))
    return batches


def main():
    torch.manual_seed(0)
    trainer = Trainer(TrainConfig())
    trainer.fit(synthetic_volumes(3), synthetic_volumes(1, seed=1))


if __name__ == "__main__":
    main()
