# expect: clean
# source: https://github.com/jacobgil/pytorch-grad-cam/issues/109
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class TinyUNet(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Conv2d(8, n_classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        d = self.dec(torch.cat([self.up(e2), e1], 1))
        return self.head(d)


class GradCAM:
    def __init__(self, model, target_layer):
        self.model = model.eval()
        self.activations, self.gradients = [], []
        target_layer.register_forward_hook(self.save_activation)
        target_layer.register_full_backward_hook(self.save_gradient)

    def save_activation(self, module, inp, out):
        self.activations.append(out.detach())

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = [grad_output[0].detach()] + self.gradients

    def get_loss(self, output, target_category):
        loss = 0
        for i in range(len(target_category)):
            loss = loss + output[i, target_category[i]].mean()
        return loss

    def __call__(self, input_tensor, target_category):
        self.activations, self.gradients = [], []
        output = self.model(input_tensor)
        if isinstance(target_category, int):
            target_category = [target_category] * input_tensor.size(0)
        self.model.zero_grad()
        loss = self.get_loss(output, target_category)
        loss.backward(retain_graph=True)
        acts, grads = self.activations[-1], self.gradients[-1]
        weights = grads.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * acts).sum(1))
        cam = F.interpolate(cam[:, None], size=input_tensor.shape[-2:], mode="bilinear")[:, 0]
        cam = cam - cam.amin(dim=(1, 2), keepdim=True)
        return (cam / (cam.amax(dim=(1, 2), keepdim=True) + 1e-7)).numpy()


model = TinyUNet()
cam = GradCAM(model, target_layer=model.dec)
images = torch.rand(2, 3, 32, 32)
heatmaps = cam(images, target_category=1)
print(heatmaps.shape, np.round(heatmaps.mean(), 3))
