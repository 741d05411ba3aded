# expect: numpy_requires_grad
# shape: a numpy-side explainer batches its input with `np.expand_dims`; the caller hands it an image tensor on which it turned requires_grad on, which numpy cannot convert
import numpy as np
import torch
from torch import nn


class NumpyExplainer:
    def get_mask(self, x_value, call_model):
        batched = np.expand_dims(x_value, axis=0)  # raises
        return call_model(batched)[0]


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))

    def call_model(images):
        images = torch.tensor(images, dtype=torch.float32).requires_grad_(True)
        out = model(images)[:, 0].sum()
        return torch.autograd.grad(out, images)[0].numpy()

    image = torch.rand(3, 4).requires_grad_(True)
    mask = NumpyExplainer().get_mask(image, call_model)
    print(mask.shape)


if __name__ == "__main__":
    main()
