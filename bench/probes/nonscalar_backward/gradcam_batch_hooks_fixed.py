# expect: clean
# source: https://github.com/1Konny/gradcam_plus_plus-pytorch/issues/7
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_ch, out_ch, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2)
        self.layer3 = BasicBlock(32, 64, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def find_resnet_layer(arch, target_layer_name):
    if target_layer_name is None:
        return arch.layer3
    target = arch
    for part in target_layer_name.split("_"):
        target = getattr(target, part)
    return target


class GradCAM(object):
    """Grad-CAM saliency maps for a conv layer picked via model_dict."""

    def __init__(self, model_dict, verbose=False):
        layer_name = model_dict["layer_name"]
        self.model_arch = model_dict["arch"]

        self.gradients = dict()
        self.activations = dict()

        def backward_hook(module, grad_input, grad_output):
            self.gradients["value"] = grad_output[0]
            return None

        def forward_hook(module, input, output):
            self.activations["value"] = output
            return None

        target_layer = find_resnet_layer(self.model_arch, layer_name)
        target_layer.register_forward_hook(forward_hook)
        target_layer.register_full_backward_hook(backward_hook)

        if verbose:
            h, w = model_dict["input_size"]
            with torch.no_grad():
                self.model_arch(torch.zeros(1, 3, h, w))
            print("saliency_map size :", tuple(self.activations["value"].shape[2:]))

    def forward(self, input, class_idx=None, retain_graph=False):
        b, c, h, w = input.size()

        logit = self.model_arch(input)
        if class_idx is None:
            score = logit.gather(1, logit.max(1)[-1].view(-1, 1)).squeeze()
        else:
            score = logit[:, class_idx].squeeze()

        self.model_arch.zero_grad()
        score.backward(gradient=torch.ones_like(score), retain_graph=retain_graph)
        gradients = self.gradients["value"]
        activations = self.activations["value"]
        b, k, u, v = gradients.size()

        alpha = gradients.view(b, k, -1).mean(2)
        weights = alpha.view(b, k, 1, 1)

        saliency_map = (weights * activations).sum(1, keepdim=True)
        saliency_map = F.relu(saliency_map)
        saliency_map = F.interpolate(saliency_map, size=(h, w), mode="bilinear", align_corners=False)
        saliency_map_min, saliency_map_max = saliency_map.min(), saliency_map.max()
        saliency_map = (saliency_map - saliency_map_min).div(saliency_map_max - saliency_map_min + 1e-8).data

        return saliency_map, logit

    def __call__(self, input, class_idx=None, retain_graph=False):
        return self.forward(input, class_idx, retain_graph)


def visualize_cam(mask, img):
    heat = mask.squeeze(1).cpu().numpy()
    heat = np.stack([heat, np.zeros_like(heat), 1.0 - heat], axis=1)
    img_np = img.cpu().numpy()
    img_np = (img_np - img_np.min()) / (img_np.max() - img_np.min())
    result = 0.5 * heat + 0.5 * img_np
    return heat, result / result.max()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Grad-CAM over a batch of images")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--layer-name", default="layer3")
    p.add_argument("--class-idx", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    resnet = SmallResNet(num_classes=10)
    resnet.eval()
    model_dict = dict(
        type="resnet",
        arch=resnet,
        layer_name=args.layer_name,
        input_size=(args.image_size, args.image_size),
    )
    gradcam = GradCAM(model_dict, verbose=True)

    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    images = torch.rand(args.batch_size, 3, args.image_size, args.image_size)
    inputs = (images - mean) / std

    mask, logit = gradcam(inputs, class_idx=args.class_idx)
    heatmap, cam_result = visualize_cam(mask, images)

    preds = logit.argmax(1).tolist()
    for i, pred in enumerate(preds):
        print(f"image {i}: pred={pred} cam_mean={cam_result[i].mean():.4f}")


if __name__ == "__main__":
    main([])
