# expect: clean
# source: https://github.com/PAIR-code/saliency/issues/84
"""Vanilla-gradient saliency for a small CNN, written against a PAIR-saliency
style core API (GetMask(x_value, call_model_function, call_model_args)) that
works on numpy arrays and calls back into a PyTorch model."""
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)

INPUT_OUTPUT_GRADIENTS = "INPUT_OUTPUT_GRADIENTS"


class GradientSaliency:
    """numpy-side core: batches the input and asks the model callback for grads."""

    def GetMask(self, x_value, call_model_function, call_model_args=None):
        x_value_batched = np.expand_dims(x_value, axis=0)
        data = call_model_function(x_value_batched, call_model_args,
                                   expected_keys=[INPUT_OUTPUT_GRADIENTS])
        return data[INPUT_OUTPUT_GRADIENTS][0]


model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
model.eval()
class_idx_str = "class_idx_str"


def call_model_function(images, call_model_args=None, expected_keys=None):
    images = torch.tensor(images, dtype=torch.float32).permute(0, 3, 1, 2)
    images.requires_grad_(True)
    target_class_idx = call_model_args[class_idx_str]
    output = model(images)
    outputs = output[:, target_class_idx]
    grads = torch.autograd.grad(outputs, images, grad_outputs=torch.ones_like(outputs))[0]
    grads = grads.permute(0, 2, 3, 1).detach().numpy()
    return {INPUT_OUTPUT_GRADIENTS: grads}


img = torch.rand(3, 32, 32)  # CHW image as it comes out of the transform
im = img.permute(1, 2, 0).numpy()

with torch.no_grad():
    predictions = model(img.unsqueeze(0))
prediction_class = int(predictions.argmax(dim=1)[0])
call_model_args = {class_idx_str: prediction_class}
print("Prediction class:", prediction_class)

gradient_saliency = GradientSaliency()
vanilla_mask_3d = gradient_saliency.GetMask(im, call_model_function, call_model_args)
vanilla_mask_grayscale = np.sum(np.abs(vanilla_mask_3d), axis=2)
vmax = np.percentile(vanilla_mask_grayscale, 99)
vmin = np.min(vanilla_mask_grayscale)
vanilla_mask_grayscale = np.clip((vanilla_mask_grayscale - vmin) / (vmax - vmin + 1e-12), 0, 1)
print("mask shape:", vanilla_mask_grayscale.shape, "mean:", float(vanilla_mask_grayscale.mean()))
