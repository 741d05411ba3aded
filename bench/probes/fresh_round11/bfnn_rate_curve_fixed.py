# expect: clean
# source: https://github.com/w5688414/BFNN/issues/1
"""BFNN test script: a beamforming network maps estimated CSI to analog
phase shifts and the achievable spectral efficiency is evaluated over a sweep
of SNRs, then collected into a curve for plotting."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


class BFNN(nn.Module):
    def __init__(self):
        super(BFNN, self).__init__()
        self.batch_norm_v2 = nn.BatchNorm2d(1)
        self.flatten = nn.Flatten()
        self.batch_norm_v1 = nn.BatchNorm1d(128)
        self.batch_norm1 = nn.BatchNorm1d(256)
        self.hidden1 = nn.Linear(128, 256)
        self.hidden2 = nn.Linear(256, 128)
        self.hidden3 = nn.Linear(128, 64)

    def forward(self, x, perfect_CSI, SNR_input):
        x = self.batch_norm_v2(x)
        x = self.flatten(x)
        x = self.batch_norm_v1(x)
        x = F.relu(self.hidden1(x))
        x = self.batch_norm1(x)
        x = F.relu(self.hidden2(x))
        x = self.hidden3(x)
        # V_RF
        VRF = torch.cat((torch.cos(x), torch.sin(x)), 1)
        hv = torch.bmm(perfect_CSI.view(-1, 1, 128), VRF.view(-1, 128, 1))
        hv = self.flatten(hv)
        tmp_input = 1 + SNR_input / 64 * torch.pow(torch.abs(hv), 2)
        rate = torch.log(tmp_input.float()) / torch.log(torch.tensor(2.0))
        return -rate


def plot_curve(xs, ys, title):
    # same conversion matplotlib applies to its inputs
    xs = np.atleast_1d(np.asarray(xs, dtype=float))
    ys = np.atleast_1d(ys)
    print(title)
    for a, b in zip(xs, ys):
        print(f"  SNR {a:5.1f} dB -> {float(b):.4f} bit/s/Hz")


if __name__ == "__main__":
    model = BFNN()
    model.eval()

    n = 32
    H_est = np.random.randn(n, 2, 64)
    H = np.random.randn(n, 128)
    H_input = torch.from_numpy(np.expand_dims(H_est.reshape(n, 128), 1)).to(torch.float32)
    H_input = H_input.view(n, 1, 2, 64)
    H = torch.from_numpy(H).to(dtype=torch.float32)

    rate = []
    for snr in range(-20, 25, 5):
        SNR = np.power(10, np.ones([H.shape[0], 1]) * snr / 10)
        SNR = torch.from_numpy(SNR)
        outputs = model(H_input, H, SNR)
        y = outputs.mean()
        rate.append(-y.item())
    print(rate)

    plot_curve(range(-20, 25, 5), rate, "The result of BFNN")
