# expect: leaf_inplace
# shape: a transform pipeline of lambdas (`lambda x: x.mul_(1 / 255)`) applied to the image being optimised, a leaf that requires grad: the in-place lambda raises where it runs; its out-of-place twin returns the same value
import torch


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


postprocess = Compose([
    lambda x: x.mul_(1.0 / 255),  # raises
    lambda x: x.clamp(0, 1),
])

image = torch.rand(1, 3, 8, 8, requires_grad=True)
opt = torch.optim.LBFGS([image])
loss = postprocess(image).pow(2).mean()
loss.backward()
