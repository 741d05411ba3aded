# expect: inplace_version
# source: https://github.com/philsyn/DiffWave-Vocoder/issues/2
"""DiffWave mel-conditioned neural vocoder: WaveNet-style residual denoiser
with diffusion-step embeddings and a transposed-conv mel upsampler in every
residual layer, trained with the epsilon-prediction loss.  util / WaveNet /
train are folded into one script; the mel spectrograms and waveforms are
synthetic (80 bands, hop 256) and the network is shrunk for CPU.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ------------------------------------------------------------------ util.py
def std_normal(size):
    return torch.normal(0, 1, size=size)


def calc_diffusion_step_embedding(diffusion_steps, diffusion_step_embed_dim_in):
    """Sinusoidal embedding of the diffusion step t, shape (B, dim_in)."""
    assert diffusion_step_embed_dim_in % 2 == 0
    half_dim = diffusion_step_embed_dim_in // 2
    _embed = np.log(10000) / (half_dim - 1)
    _embed = torch.exp(torch.arange(half_dim) * -_embed)
    _embed = diffusion_steps * _embed
    return torch.cat((torch.sin(_embed), torch.cos(_embed)), 1)


def calc_diffusion_hyperparams(T, beta_0, beta_T):
    Beta = torch.linspace(beta_0, beta_T, T)
    Alpha = 1 - Beta
    Alpha_bar = Alpha + 0
    Beta_tilde = Beta + 0
    for t in range(1, T):
        Alpha_bar[t] *= Alpha_bar[t - 1]
        Beta_tilde[t] *= (1 - Alpha_bar[t - 1]) / (1 - Alpha_bar[t])
    Sigma = torch.sqrt(Beta_tilde)
    return {"T": T, "Beta": Beta, "Alpha": Alpha, "Alpha_bar": Alpha_bar, "Sigma": Sigma}


def training_loss(net, loss_fn, X, diffusion_hyperparams):
    """Epsilon-prediction loss at a uniformly sampled diffusion step."""
    _dh = diffusion_hyperparams
    T, Alpha_bar = _dh["T"], _dh["Alpha_bar"]
    mel_spectrogram, audio = X
    B, C, L = audio.shape
    diffusion_steps = torch.randint(T, size=(B, 1, 1))
    z = std_normal(audio.shape)
    transformed_X = torch.sqrt(Alpha_bar[diffusion_steps]) * audio + torch.sqrt(1 - Alpha_bar[diffusion_steps]) * z
    epsilon_theta = net((transformed_X, mel_spectrogram, diffusion_steps.view(B, 1),))
    return loss_fn(epsilon_theta, z)


# ------------------------------------------------------------------ WaveNet.py
def swish(x):
    return x * torch.sigmoid(x)


class Conv(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=3, dilation=1):
        super().__init__()
        self.padding = dilation * (kernel_size - 1) // 2
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding=self.padding)
        self.conv = nn.utils.weight_norm(self.conv)
        nn.init.kaiming_normal_(self.conv.weight)

    def forward(self, x):
        return self.conv(x)


class ZeroConv1d(nn.Module):
    def __init__(self, in_channel, out_channel):
        super().__init__()
        self.conv = nn.Conv1d(in_channel, out_channel, kernel_size=1, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()

    def forward(self, x):
        return self.conv(x)


class Residual_block(nn.Module):
    def __init__(self, res_channels, skip_channels, dilation, diffusion_step_embed_dim_out, n_mels):
        super().__init__()
        self.res_channels = res_channels
        # the layer-specific fc for diffusion step embedding
        self.fc_t = nn.Linear(diffusion_step_embed_dim_out, self.res_channels)
        # dilated conv layer
        self.dilated_conv_layer = Conv(self.res_channels, 2 * self.res_channels, kernel_size=3, dilation=dilation)
        # add mel spectrogram upsampler and conditioner conv1x1 layer
        self.upsample_conv2d = nn.ModuleList()
        for s in [16, 16]:
            conv_trans2d = nn.ConvTranspose2d(1, 1, (3, 2 * s), padding=(1, s // 2), stride=(1, s))
            conv_trans2d = nn.utils.weight_norm(conv_trans2d)
            nn.init.kaiming_normal_(conv_trans2d.weight)
            self.upsample_conv2d.append(conv_trans2d)
        self.mel_conv = Conv(n_mels, 2 * self.res_channels, kernel_size=1)
        # residual conv1x1 layer, connect to next residual layer
        self.res_conv = nn.utils.weight_norm(nn.Conv1d(res_channels, res_channels, kernel_size=1))
        nn.init.kaiming_normal_(self.res_conv.weight)
        # skip conv1x1 layer, add to all skip outputs through skip connections
        self.skip_conv = nn.utils.weight_norm(nn.Conv1d(res_channels, skip_channels, kernel_size=1))
        nn.init.kaiming_normal_(self.skip_conv.weight)

    def forward(self, input_data):
        x, mel_spec, diffusion_step_embed = input_data
        h = x
        B, C, L = x.shape
        assert C == self.res_channels

        # add in diffusion step embedding
        part_t = self.fc_t(diffusion_step_embed)
        part_t = part_t.view([B, self.res_channels, 1])
        h += part_t

        # dilated conv layer
        h = self.dilated_conv_layer(h)

        # upsample spectrogram to size of audio and add it as (local) conditioner
        mel_spec = torch.unsqueeze(mel_spec, dim=1)
        mel_spec = F.leaky_relu(self.upsample_conv2d[0](mel_spec), 0.4)
        mel_spec = F.leaky_relu(self.upsample_conv2d[1](mel_spec), 0.4)
        mel_spec = torch.squeeze(mel_spec, dim=1)
        assert mel_spec.size(2) >= L
        if mel_spec.size(2) > L:
            mel_spec = mel_spec[:, :, :L]
        mel_spec = self.mel_conv(mel_spec)
        h += mel_spec

        # gated-tanh nonlinearity
        out = torch.tanh(h[:, : self.res_channels, :]) * torch.sigmoid(h[:, self.res_channels:, :])

        # residual and skip outputs
        res = self.res_conv(out)
        assert x.shape == res.shape
        skip = self.skip_conv(out)
        return (x + res) * math.sqrt(0.5), skip  # normalize for training stability


class Residual_group(nn.Module):
    def __init__(self, res_channels, skip_channels, num_res_layers, dilation_cycle,
                 diffusion_step_embed_dim_in, diffusion_step_embed_dim_mid, diffusion_step_embed_dim_out, n_mels):
        super().__init__()
        self.num_res_layers = num_res_layers
        self.diffusion_step_embed_dim_in = diffusion_step_embed_dim_in
        # the shared two fc layers for diffusion step embedding
        self.fc_t1 = nn.Linear(diffusion_step_embed_dim_in, diffusion_step_embed_dim_mid)
        self.fc_t2 = nn.Linear(diffusion_step_embed_dim_mid, diffusion_step_embed_dim_out)
        self.residual_blocks = nn.ModuleList([
            Residual_block(res_channels, skip_channels, dilation=2 ** (n % dilation_cycle),
                           diffusion_step_embed_dim_out=diffusion_step_embed_dim_out, n_mels=n_mels)
            for n in range(self.num_res_layers)])

    def forward(self, input_data):
        x, mel_spectrogram, diffusion_steps = input_data
        diffusion_step_embed = calc_diffusion_step_embedding(diffusion_steps, self.diffusion_step_embed_dim_in)
        diffusion_step_embed = swish(self.fc_t1(diffusion_step_embed))
        diffusion_step_embed = swish(self.fc_t2(diffusion_step_embed))
        h = x
        skip = 0
        for n in range(self.num_res_layers):
            h, skip_n = self.residual_blocks[n]((h, mel_spectrogram, diffusion_step_embed))
            skip += skip_n  # accumulate all skip outputs
        return skip * math.sqrt(1.0 / self.num_res_layers)


class WaveNet_vocoder(nn.Module):
    def __init__(self, in_channels, res_channels, skip_channels, out_channels, num_res_layers, dilation_cycle,
                 diffusion_step_embed_dim_in, diffusion_step_embed_dim_mid, diffusion_step_embed_dim_out, n_mels=80):
        super().__init__()
        # initial conv1x1 with relu
        self.init_conv = nn.Sequential(Conv(in_channels, res_channels, kernel_size=1), nn.ReLU())
        self.residual_layer = Residual_group(res_channels, skip_channels, num_res_layers, dilation_cycle,
                                             diffusion_step_embed_dim_in, diffusion_step_embed_dim_mid,
                                             diffusion_step_embed_dim_out, n_mels)
        # final conv1x1 -> relu -> zeroconv1x1
        self.final_conv = nn.Sequential(Conv(skip_channels, skip_channels, kernel_size=1), nn.ReLU(),
                                        ZeroConv1d(skip_channels, out_channels))

    def forward(self, input_data):
        audio, mel_spectrogram, diffusion_steps = input_data
        x = self.init_conv(audio)
        x = self.residual_layer((x, mel_spectrogram, diffusion_steps))
        return self.final_conv(x)


# ------------------------------------------------------------------ train.py
wavenet_config = {"in_channels": 1, "out_channels": 1, "num_res_layers": 4, "dilation_cycle": 2,
                  "res_channels": 8, "skip_channels": 8, "diffusion_step_embed_dim_in": 16,
                  "diffusion_step_embed_dim_mid": 32, "diffusion_step_embed_dim_out": 32, "n_mels": 80}
diffusion_config = {"T": 200, "beta_0": 0.0001, "beta_T": 0.02}
train_config = {"n_iters": 4, "learning_rate": 2e-4, "batch_size": 2, "frames": 4, "iters_per_logging": 2}


def synthetic_loader(batch_size, frames, n_batches):
    for _ in range(n_batches):
        mel = torch.randn(batch_size, 80, frames).clamp(-4, 4)
        t = torch.arange(frames * 256).float() / 22050
        audio = 0.3 * torch.sin(2 * math.pi * 220 * t)[None].repeat(batch_size, 1) + 0.01 * torch.randn(batch_size, frames * 256)
        yield mel, audio


def train(n_iters, learning_rate, batch_size, frames, iters_per_logging):
    diffusion_hyperparams = calc_diffusion_hyperparams(**diffusion_config)
    net = WaveNet_vocoder(**wavenet_config)
    optimizer = torch.optim.Adam(net.parameters(), lr=learning_rate)
    n_iter = 0
    for mel_spectrogram, audio in synthetic_loader(batch_size, frames, n_iters):
        audio = audio.unsqueeze(1)
        optimizer.zero_grad()
        X = (mel_spectrogram, audio)
        loss = training_loss(net, nn.MSELoss(), X, diffusion_hyperparams)
        reduced_loss = loss.item()
        loss.backward()  # raises
        optimizer.step()
        if n_iter % iters_per_logging == 0:
            print("iteration: {} \treduced loss: {:.7f} \tloss: {:.7f}".format(n_iter, reduced_loss, loss.item()))
        n_iter += 1
    return net


if __name__ == "__main__":
    train(**train_config)
