# expect: clean
# source: https://github.com/jacobgil/pytorch-grad-cam/issues/446
# camvisual.py -- Grad-CAM on a Swin-style backbone (pytorch_grad_cam's BaseCAM trimmed to what runs here)
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)


class ClassifierOutputTarget:
    def __init__(self, category):
        self.category = category

    def __call__(self, model_output):
        if len(model_output.shape) == 1:
            return model_output[self.category]
        return model_output[:, self.category]


class GradCAM:
    def __init__(self, model, target_layers, reshape_transform=None):
        self.model, self.reshape_transform = model.eval(), reshape_transform
        self.activations, self.gradients = [], []
        for layer in target_layers:
            layer.register_forward_hook(self.save_activation)

    def save_activation(self, module, input, output):
        self.activations.append(self.reshape_transform(output).detach())
        output.register_hook(lambda g: self.gradients.insert(0, self.reshape_transform(g).detach()))

    def forward(self, input_tensor, targets):
        self.activations, self.gradients = [], []
        outputs = self.model(input_tensor)
        out_nor = self.model.norm(outputs)  # swin: norm, pool and head on top of the tokens
        outputs = self.model.head(out_nor.mean(dim=1))
        self.model.zero_grad()
        loss = sum([target(output) for target, output in zip(targets, outputs)])
        loss.backward(retain_graph=True)
        weights = self.gradients[0].mean(dim=(2, 3), keepdim=True)
        cam = torch.relu((weights * self.activations[0]).sum(dim=1))
        return (cam / (cam.amax(dim=(1, 2), keepdim=True) + 1e-7)).numpy()

    __call__ = forward


class SwinBackbone(nn.Module):
    def __init__(self, num_classes=10, dim=48, patch=4, depth=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(dim, 4, 2 * dim, batch_first=True) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # B, L, C
        for blk in self.layers:
            x = blk(x)
        return x


def reshape_transform(tensor, height=8, width=8):
    result = tensor.reshape(tensor.size(0), height, width, tensor.size(2))
    return result.permute(0, 3, 1, 2)  # channels first, like a CNN


model = SwinBackbone()
target_layers = [model.layers[-1].norm1]
cam = GradCAM(model=model, target_layers=target_layers, reshape_transform=reshape_transform)

rgb_img = np.random.rand(32, 32, 3).astype(np.float32)
img_tensor = torch.from_numpy((rgb_img - 0.5) / 0.25).permute(2, 0, 1).unsqueeze(0)
target_category = [ClassifierOutputTarget(3)]
grayscale_cam = cam(input_tensor=img_tensor, targets=target_category)
print(grayscale_cam.shape, float(grayscale_cam.max()))
