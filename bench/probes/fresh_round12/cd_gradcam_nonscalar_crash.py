# expect: nonscalar_backward
# source: https://github.com/Bobholamovic/CDLab/issues/42
"""Grad-CAM visualisation for a CDLab-style bi-temporal change-detection
network (Siamese U-Net with feature differencing). A trained model is wrapped
by a GradCAM helper that registers forward/backward hooks on a chosen layer,
and a visualiser produces normalised CAM maps for the 'changed' class on a
batch of synthetic image pairs."""
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class VisConfig:
    in_ch: int = 3
    num_classes: int = 2
    image_size: int = 32
    batch_size: int = 2
    target_layer: str = "conv43d"
    target_category: int = 1          # 1 == "changed"
    seed: int = 0
    out_keys: list = field(default_factory=lambda: ["cam", "prob"])


# --------------------------------------------------------------------- blocks
class BasicConv(nn.Module):
    def __init__(self, in_ch, out_ch, kernel_size, bn=True, act=True):
        super().__init__()
        seq = [nn.Conv2d(in_ch, out_ch, kernel_size, padding=kernel_size // 2, bias=not bn)]
        if bn:
            seq.append(nn.BatchNorm2d(out_ch))
        if act:
            seq.append(nn.ReLU())
        self.seq = nn.Sequential(*seq)

    def forward(self, x):
        return self.seq(x)


class Conv3x3(BasicConv):
    def __init__(self, in_ch, out_ch, bn=True, act=True):
        super().__init__(in_ch, out_ch, 3, bn=bn, act=act)


class MaxPool2x2(nn.MaxPool2d):
    def __init__(self):
        super().__init__(kernel_size=2, stride=2)


class ConvTransposed3x3(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.seq = nn.Sequential(
            nn.ConvTranspose2d(in_ch, out_ch, 3, stride=2, padding=1, output_padding=1, bias=False),
            nn.BatchNorm2d(out_ch), nn.ReLU())

    def forward(self, x):
        return self.seq(x)


class SiamUNet_diff(nn.Module):
    def __init__(self, in_ch, out_ch, base=8):
        super().__init__()
        c1, c2, c3 = base, base * 2, base * 4
        self.conv11, self.conv12, self.pool1 = Conv3x3(in_ch, c1), Conv3x3(c1, c1), MaxPool2x2()
        self.conv21, self.conv22, self.pool2 = Conv3x3(c1, c2), Conv3x3(c2, c2), MaxPool2x2()
        self.conv31, self.conv32, self.pool3 = Conv3x3(c2, c3), Conv3x3(c3, c3), MaxPool2x2()
        self.upconv3 = ConvTransposed3x3(c3, c3)
        self.conv43d = Conv3x3(c3 * 2, c2)
        self.upconv2 = ConvTransposed3x3(c2, c2)
        self.conv22d = Conv3x3(c2 * 2, c1)
        self.upconv1 = ConvTransposed3x3(c1, c1)
        self.conv11d = Conv3x3(c1 * 2, out_ch, bn=False, act=False)

    def encode(self, x):
        x11 = self.conv12(self.conv11(x))
        x21 = self.conv22(self.conv21(self.pool1(x11)))
        x31 = self.conv32(self.conv31(self.pool2(x21)))
        return x11, x21, x31, self.pool3(x31)

    def forward(self, t1, t2):
        a11, a21, a31, a4 = self.encode(t1)
        b11, b21, b31, b4 = self.encode(t2)
        x3d = self.conv43d(torch.cat([self.upconv3(a4), torch.abs(a31 - b31)], 1))
        x2d = self.conv22d(torch.cat([self.upconv2(x3d), torch.abs(a21 - b21)], 1))
        return self.conv11d(torch.cat([self.upconv1(x2d), torch.abs(a11 - b11)], 1))


# --------------------------------------------------------------------- grad-cam
class ActivationsAndGradients:
    def __init__(self, model, target_layer):
        self.model = model
        self.activations, self.gradients = [], []
        self.handles = [target_layer.register_forward_hook(self.save_activation),
                        target_layer.register_full_backward_hook(self.save_gradient)]

    def save_activation(self, module, inputs, output):
        self.activations.append(output.detach())

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = [grad_output[0].detach()] + self.gradients

    def __call__(self, t1, t2):
        self.activations, self.gradients = [], []
        return self.model(t1, t2)

    def release(self):
        for h in self.handles:
            h.remove()


class GradCAM:
    def __init__(self, model, target_layer):
        self.model = model.eval()
        self.activations_and_grads = ActivationsAndGradients(model, target_layer)

    @staticmethod
    def get_cam_weights(grads):
        return grads.mean(dim=(2, 3), keepdim=True)

    def __call__(self, t1, t2, target_category):
        output = self.activations_and_grads(t1, t2)
        self.model.zero_grad()
        score = output[:, target_category]
        score.backward(retain_graph=True)  # raises
        acts = self.activations_and_grads.activations[-1]
        grads = self.activations_and_grads.gradients[-1]
        cam = F.relu((self.get_cam_weights(grads) * acts).sum(dim=1, keepdim=True))
        cam = F.interpolate(cam, size=t1.shape[-2:], mode="bilinear", align_corners=False)
        cam = cam - cam.amin(dim=(2, 3), keepdim=True)
        cam = cam / (cam.amax(dim=(2, 3), keepdim=True) + 1e-7)
        return cam.squeeze(1), F.softmax(output, dim=1)[:, target_category].detach()


class CDVisualizer:
    def __init__(self, cfg: VisConfig):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.model = SiamUNet_diff(cfg.in_ch, cfg.num_classes)
        self.cam = GradCAM(self.model, getattr(self.model, cfg.target_layer))

    def make_pair(self):
        c = self.cfg
        t1 = torch.rand(c.batch_size, c.in_ch, c.image_size, c.image_size)
        t2 = t1.clone()
        t2[:, :, 8:20, 10:24] = torch.rand(c.batch_size, c.in_ch, 12, 14)   # synthetic change region
        return t1, t2

    def run(self):
        t1, t2 = self.make_pair()
        cam, prob = self.cam(t1, t2, self.cfg.target_category)
        out = {"cam": cam.numpy(), "prob": prob.numpy()}
        for k in self.cfg.out_keys:
            arr = out[k]
            print(f"{k}: shape={arr.shape} mean={float(np.mean(arr)):.4f}")
        self.cam.activations_and_grads.release()
        return out


def main():
    CDVisualizer(VisConfig()).run()


if __name__ == "__main__":
    main()
