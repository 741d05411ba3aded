# expect: inference_tensor
# shape: a project context manager class enters `torch.inference_mode()` in `__enter__` (calling the mode's own `__enter__`) and puts the model in eval mode; predicted boxes made inside are rescaled in place after the block
from typing import Any

import torch
import torch.nn as nn


class eval_infer_mode:
    def __init__(self, model: nn.Module):
        self.model = model
        self.was_training = model.training

    def __enter__(self):
        self.model.eval()
        self._mode = torch.inference_mode(True)
        self._mode.__enter__()

    def __exit__(self, type: Any, value: Any, traceback: Any):
        self._mode.__exit__(type, value, traceback)
        self.model.train(self.was_training)


class BoxHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return torch.sigmoid(self.net(x))


def predict(model, images, size=(64, 48)):
    with eval_infer_mode(model):
        boxes = model(images)
    boxes[:, 0] = boxes[:, 0] * size[0]  # raises
    return boxes


torch.manual_seed(0)
print(predict(BoxHead(), torch.randn(5, 16)))
