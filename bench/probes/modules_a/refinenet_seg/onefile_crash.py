# expect: inplace_version
# source: https://github.com/thomasjpfan/pytorch_refinenet/issues/2
"""Train a small 4-cascade RefineNet (blocks: RCU, multi-resolution fusion,
chained residual pooling) for binary foreground segmentation on synthetic 64x64 images with
bright discs as the foreground."""
import torch.nn as nn


class ResidualConvUnit(nn.Module):

    def __init__(self, features):
        super().__init__()

        self.conv1 = nn.Conv2d(features, features, kernel_size=3, stride=1, padding=1, bias=True)
        self.conv2 = nn.Conv2d(features, features, kernel_size=3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(x)
        out = self.conv1(out)
        out = self.relu(out)
        out = self.conv2(out)

        return out + x


class MultiResolutionFusion(nn.Module):

    def __init__(self, out_feats, *shapes):
        super().__init__()

        _, max_size = max(shapes, key=lambda x: x[1])

        for i, shape in enumerate(shapes):
            feat, size = shape
            scale_factor = max_size // size
            if scale_factor != 1:
                self.add_module(f"resolve{i}", nn.Sequential(
                    nn.Conv2d(feat, out_feats, kernel_size=3, stride=1, padding=1, bias=False),
                    nn.Upsample(scale_factor=scale_factor, mode='bilinear', align_corners=True)))
            else:
                self.add_module(f"resolve{i}", nn.Conv2d(feat, out_feats, kernel_size=3,
                                                         stride=1, padding=1, bias=False))

    def forward(self, *xs):
        output = self.resolve0(xs[0])

        for i, x in enumerate(xs[1:], 1):
            output += self.__getattr__(f"resolve{i}")(x)

        return output


class ChainedResidualPool(nn.Module):

    def __init__(self, feats):
        super().__init__()

        self.relu = nn.ReLU(inplace=True)
        self.block1 = nn.Sequential(nn.MaxPool2d(kernel_size=5, stride=1, padding=2),
                                    nn.Conv2d(feats, feats, kernel_size=3, stride=1, padding=1, bias=False))
        self.block2 = nn.Sequential(nn.MaxPool2d(kernel_size=5, stride=1, padding=2),
                                    nn.Conv2d(feats, feats, kernel_size=3, stride=1, padding=1, bias=False))
        self.block3 = nn.Sequential(nn.MaxPool2d(kernel_size=5, stride=1, padding=2),
                                    nn.Conv2d(feats, feats, kernel_size=3, stride=1, padding=1, bias=False))

    def forward(self, x):
        x = self.relu(x)

        out = self.block1(x)
        x += out
        out = self.block2(out)
        x += out
        out = self.block3(out)
        x += out

        return x


class RefineNetBlock(nn.Module):

    def __init__(self, features, *shapes):
        super().__init__()

        for i, shape in enumerate(shapes):
            feats = shape[0]
            self.add_module(f"rcu{i}", nn.Sequential(ResidualConvUnit(feats), ResidualConvUnit(feats)))

        if len(shapes) != 1:
            self.mrf = MultiResolutionFusion(features, *shapes)
        else:
            self.mrf = None

        self.crp = ChainedResidualPool(features)
        self.output_conv = ResidualConvUnit(features)

    def forward(self, *xs):
        rcu_xs = []
        for i, x in enumerate(xs):
            rcu_xs.append(self.__getattr__(f"rcu{i}")(x))

        if self.mrf is not None:
            out = self.mrf(*rcu_xs)
        else:
            out = rcu_xs[0]

        out = self.crp(out)
        return self.output_conv(out)


import torch.nn as nn



def _stage(in_ch, out_ch):
    return nn.Sequential(nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=2, padding=1, bias=False),
                         nn.BatchNorm2d(out_ch), nn.ReLU())


class RefineNet4Cascade(nn.Module):

    def __init__(self, input_shape, num_classes=1, features=16):
        """Multi-path 4-Cascaded RefineNet; input_shape is (channel, size) of a square input."""
        super().__init__()

        input_channel, input_size = input_shape
        # small encoder standing in for the resnet trunk (strides 4, 8, 16, 32)
        self.layer1 = nn.Sequential(_stage(input_channel, 16), _stage(16, 16))
        self.layer2 = _stage(16, 32)
        self.layer3 = _stage(32, 48)
        self.layer4 = _stage(48, 64)

        self.layer1_rn = nn.Conv2d(16, features, 3, stride=1, padding=1, bias=False)
        self.layer2_rn = nn.Conv2d(32, features, 3, stride=1, padding=1, bias=False)
        self.layer3_rn = nn.Conv2d(48, features, 3, stride=1, padding=1, bias=False)
        self.layer4_rn = nn.Conv2d(64, 2 * features, 3, stride=1, padding=1, bias=False)

        self.refinenet4 = RefineNetBlock(2 * features, (2 * features, input_size // 32))
        self.refinenet3 = RefineNetBlock(
            features, (2 * features, input_size // 32), (features, input_size // 16))
        self.refinenet2 = RefineNetBlock(
            features, (features, input_size // 16), (features, input_size // 8))
        self.refinenet1 = RefineNetBlock(
            features, (features, input_size // 8), (features, input_size // 4))

        self.output_conv = nn.Sequential(
            ResidualConvUnit(features), ResidualConvUnit(features),
            nn.Conv2d(features, num_classes, kernel_size=1, stride=1, padding=0, bias=True))

    def forward(self, x):
        layer_1 = self.layer1(x)
        layer_2 = self.layer2(layer_1)
        layer_3 = self.layer3(layer_2)
        layer_4 = self.layer4(layer_3)
        layer_1_rn = self.layer1_rn(layer_1)
        layer_2_rn = self.layer2_rn(layer_2)
        layer_3_rn = self.layer3_rn(layer_3)
        layer_4_rn = self.layer4_rn(layer_4)
        path_4 = self.refinenet4(layer_4_rn)
        path_3 = self.refinenet3(path_4, layer_3_rn)
        path_2 = self.refinenet2(path_3, layer_2_rn)
        path_1 = self.refinenet1(path_2, layer_1_rn)
        out = self.output_conv(path_1)
        return out


import torch
import torch.nn as nn
import torch.nn.functional as F


torch.manual_seed(0)

IMG_SIZE = 64


def make_batch(n):
    yy, xx = torch.meshgrid(torch.arange(IMG_SIZE), torch.arange(IMG_SIZE), indexing="ij")
    cx = torch.randint(16, 48, (n, 1, 1))
    cy = torch.randint(16, 48, (n, 1, 1))
    r = torch.randint(6, 14, (n, 1, 1))
    mask = (((xx - cx) ** 2 + (yy - cy) ** 2) <= r ** 2).float().unsqueeze(1)
    img = mask.repeat(1, 3, 1, 1) * 0.8 + 0.2 * torch.rand(n, 3, IMG_SIZE, IMG_SIZE)
    return img, mask


model = RefineNet4Cascade((3, IMG_SIZE), num_classes=1, features=16)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.BCEWithLogitsLoss()

for step in range(3):
    images, masks = make_batch(4)
    logits = model(images)
    logits = F.interpolate(logits, size=masks.shape[-2:], mode="bilinear", align_corners=False)
    loss = criterion(logits, masks)

    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
