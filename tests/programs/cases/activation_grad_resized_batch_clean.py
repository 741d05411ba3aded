# expect: clean
# shape: the gradient of each image's activation is asked for with grad_outputs of ones
import torch
import torch.nn as nn
import torch.nn.functional as F


class Generator(nn.Module):
    def __init__(self, latent=16, size=16):
        super().__init__()
        self.size = size
        self.fc = nn.Linear(latent, 3 * size * size)

    def forward(self, z):
        return torch.tanh(self.fc(z)).view(z.size(0), 3, self.size, self.size)


class ActivationProbe:
    def __init__(self, generator, classifier, preprocess=lambda img: F.interpolate(img, size=(32, 32))):
        self.generator, self.classifier, self.preprocess = generator, classifier, preprocess

    def channel_gradient(self, z, channel, i, j):
        images = self.preprocess(self.generator(z))
        activations = self.classifier(images)[:, channel, i, j]
        return torch.autograd.grad(activations, z, grad_outputs=torch.ones_like(activations))[0]


torch.manual_seed(0)
generator = Generator()
classifier = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())
probe = ActivationProbe(generator, classifier)
z = torch.randn(2, 16, requires_grad=True)
grad = probe.channel_gradient(z, channel=3, i=4, j=5)
