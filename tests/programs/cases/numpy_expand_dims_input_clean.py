# expect: clean
# shape: the same explainer given the image as a numpy array (detached first): numpy batches it, the model callback differentiates its own tensor
import numpy as np
import torch
from torch import nn


class NumpyExplainer:
    def get_mask(self, x_value, call_model):
        batched = np.expand_dims(x_value, axis=0)
        return call_model(batched)[0]


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))

    def call_model(images):
        images = torch.tensor(images, dtype=torch.float32).requires_grad_(True)
        out = model(images)[:, 0].sum()
        return torch.autograd.grad(out, images)[0].numpy()

    image = torch.rand(3, 4).requires_grad_(True)
    mask = NumpyExplainer().get_mask(image.detach().numpy(), call_model)
    print(mask.shape)


if __name__ == "__main__":
    main()
