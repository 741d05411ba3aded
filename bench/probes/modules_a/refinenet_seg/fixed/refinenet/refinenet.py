import torch.nn as nn

from .blocks import RefineNetBlock, ResidualConvUnit


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
