# expect: nonscalar_backward
# source: https://github.com/ramprs/grad-cam/issues/26
"""Grad-CAM on a small UNet segmentation network trained on VOC-style classes:
forward hooks capture the activation of an intermediate encoder block, backward
hooks capture its gradient, and the class score of one category is
back-propagated to build the class activation map."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, n_classes=21):
        super().__init__()
        self.enc1 = block(3, 16)
        self.enc2 = block(16, 32)
        self.bottleneck = block(32, 64)
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.dec2 = block(64, 32)
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec1 = block(32, 16)
        self.head = nn.Conv2d(16, n_classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        b = self.bottleneck(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.head(d1)


model = UNet().eval()
store = {}
layer = model.bottleneck
layer.register_forward_hook(lambda m, i, o: store.__setitem__("act", o))
layer.register_full_backward_hook(lambda m, gi, go: store.__setitem__("grad", go[0]))

img = torch.rand(1, 3, 64, 64)
target_class = 15  # "person"

output = model(img)
score = output[:, target_class]
model.zero_grad()
score.backward()  # raises

weights = store["grad"].mean(dim=(2, 3), keepdim=True)
cam = F.relu((weights * store["act"]).sum(1, keepdim=True))
cam = F.interpolate(cam, size=img.shape[-2:], mode="bilinear", align_corners=False)
cam = (cam - cam.min()) / (cam.max() - cam.min() + 1e-8)
print("cam:", tuple(cam.shape), "mean activation %.4f" % cam.mean().item())
