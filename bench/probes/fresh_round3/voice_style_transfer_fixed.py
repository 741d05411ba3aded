# expect: clean
# source: https://github.com/mazzzystar/randomCNN-voice-transfer/issues/16
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable

torch.manual_seed(0)
np.random.seed(0)
DEVICE, DTYPE = torch.device("cpu"), torch.float64
N_FFT, HOP = 128, 32


def wav2spectrum(x):
    frames = np.stack([x[i:i + N_FFT] * np.hanning(N_FFT) for i in range(0, len(x) - N_FFT, HOP)], 1)
    return np.log1p(np.abs(np.fft.rfft(frames, axis=0)))


def to_device(t):
    return t.to(device=DEVICE, dtype=DTYPE)


class RandomCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=(3, 1), stride=1, padding=0)
        self.LeakyReLU = nn.LeakyReLU(0.2)
        self.conv1.weight = nn.Parameter(torch.randn(self.conv1.weight.shape), requires_grad=False)
        self.conv1.bias = nn.Parameter(torch.zeros(self.conv1.bias.shape), requires_grad=False)

    def forward(self, x):
        return self.LeakyReLU(self.conv1(x))


def gram(a):
    return a @ a.t()


t = np.linspace(0, 1, 4000)
a_content = wav2spectrum(np.sin(2 * np.pi * 220 * t) + 0.1 * np.random.randn(t.size))
a_style = wav2spectrum(np.sign(np.sin(2 * np.pi * 330 * t)) + 0.1 * np.random.randn(t.size))
a_content_torch = torch.from_numpy(a_content)[None, None, :, :]
a_style_torch = torch.from_numpy(a_style)[None, None, :, :]

model = RandomCNN().to(device=DEVICE, dtype=DTYPE).eval()
a_C = model(to_device(a_content_torch))
a_S = model(to_device(a_style_torch))

a_G_var = Variable(torch.randn(a_content_torch.shape) * 1e-3)
a_G_var = to_device(a_G_var)
a_G_var.requires_grad = True
optimizer = torch.optim.Adam([a_G_var], lr=0.002)

for epoch in range(1, 201):
    optimizer.zero_grad()
    a_G = model(a_G_var)
    m, n_C, n_H, n_W = a_G.shape
    content_loss = 1e2 * torch.sum((a_C - a_G) ** 2) / (4 * m * n_C * n_H * n_W)
    gs, gg = gram(a_S.view(n_C, -1)), gram(a_G.view(n_C, -1))
    style_loss = torch.sum((gs - gg) ** 2) / (4 * n_C ** 2 * (n_H * n_W) ** 2)
    loss = content_loss + style_loss
    loss.backward()
    optimizer.step()
    if epoch % 50 == 0:
        print(f"{epoch} content_loss:{content_loss.item():.4f} style_loss:{style_loss.item():.6f}")

gen_spectrum = a_G_var.cpu().data.numpy().squeeze()
print(gen_spectrum.shape)
