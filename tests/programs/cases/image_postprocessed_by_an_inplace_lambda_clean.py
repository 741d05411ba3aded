# expect: clean
# shape: the twin of image_postprocessed_by_an_inplace_lambda_crash.py whose lambda scales out of place (`x.mul(1 / 255)`)
import torch


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


postprocess = Compose([
    lambda x: x.mul(1.0 / 255),
    lambda x: x.clamp(0, 1),
])

image = torch.rand(1, 3, 8, 8, requires_grad=True)
opt = torch.optim.LBFGS([image])
loss = postprocess(image).pow(2).mean()
loss.backward()
