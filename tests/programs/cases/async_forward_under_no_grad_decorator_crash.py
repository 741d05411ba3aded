# expect: numpy_requires_grad
# shape: a detector's async `_forward` is decorated `@torch.no_grad()`, which switches the mode only while the call makes the coroutine: its body runs when awaited, with gradients recorded, and converts the model's mask to numpy
import asyncio

import torch
import torch.nn as nn


class Detector:
    def __init__(self):
        self.model = nn.Conv2d(3, 1, 3, padding=1)

    async def detect(self, image):
        return await self._forward(image)

    @torch.no_grad()
    async def _forward(self, image):
        mask = self.model(image).sigmoid()
        return mask.numpy()  # raises


detector = Detector()
print(asyncio.run(detector.detect(torch.rand(1, 3, 8, 8))).shape)
