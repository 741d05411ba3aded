# expect: freed_graph
# source: https://github.com/yuval-alaluf/restyle-encoder/issues/15
"""ReStyle-pSp training coach on a converted StyleGAN2 generator (small sizes)."""
import math
from argparse import Namespace

import torch
import torch.nn.functional as F
from torch import nn


class PixelNorm(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-8)


class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, bias_init=0.0, lr_mul=1.0, activation=None):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init))
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, x):
        out = F.linear(x, self.weight * self.scale, bias=self.bias * self.lr_mul)
        if self.activation:
            out = F.leaky_relu(out, 0.2) * math.sqrt(2)
        return out


class ModulatedConv2d(nn.Module):
    def __init__(self, in_ch, out_ch, kernel_size, style_dim, demodulate=True):
        super().__init__()
        self.in_ch, self.out_ch, self.kernel_size = in_ch, out_ch, kernel_size
        self.scale = 1 / math.sqrt(in_ch * kernel_size ** 2)
        self.padding = kernel_size // 2
        self.weight = nn.Parameter(torch.randn(1, out_ch, in_ch, kernel_size, kernel_size))
        self.modulation = EqualLinear(style_dim, in_ch, bias_init=1)
        self.demodulate = demodulate

    def forward(self, x, style):
        batch, in_ch, height, width = x.shape
        style = self.modulation(style).view(batch, 1, in_ch, 1, 1)
        weight = self.scale * self.weight * style
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, self.out_ch, 1, 1, 1)
        weight = weight.view(batch * self.out_ch, in_ch, self.kernel_size, self.kernel_size)
        x = x.view(1, batch * in_ch, height, width)
        out = F.conv2d(x, weight, padding=self.padding, groups=batch)
        return out.view(batch, self.out_ch, height, width)


class StyledConv(nn.Module):
    def __init__(self, in_ch, out_ch, style_dim, upsample=False):
        super().__init__()
        self.upsample = upsample
        self.conv = ModulatedConv2d(in_ch, out_ch, 3, style_dim)
        self.noise_weight = nn.Parameter(torch.zeros(1))
        self.bias = nn.Parameter(torch.zeros(1, out_ch, 1, 1))

    def forward(self, x, style, noise=None):
        if self.upsample:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        out = self.conv(x, style)
        if noise is None:
            noise = out.new_empty(out.shape[0], 1, out.shape[2], out.shape[3]).normal_()
        out = out + self.noise_weight * noise
        return F.leaky_relu(out + self.bias, 0.2) * math.sqrt(2)


class ToRGB(nn.Module):
    def __init__(self, in_ch, style_dim):
        super().__init__()
        self.conv = ModulatedConv2d(in_ch, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x, style, skip=None):
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + F.interpolate(skip, scale_factor=2, mode="bilinear", align_corners=False)
        return out


class Generator(nn.Module):
    def __init__(self, size, style_dim, n_mlp, channels=32):
        super().__init__()
        self.size, self.style_dim = size, style_dim
        layers = [PixelNorm()] + [EqualLinear(style_dim, style_dim, lr_mul=0.01, activation=True)
                                  for _ in range(n_mlp)]
        self.style = nn.Sequential(*layers)
        self.input = nn.Parameter(torch.randn(1, channels, 4, 4))
        self.conv1 = StyledConv(channels, channels, style_dim)
        self.to_rgb1 = ToRGB(channels, style_dim)
        self.log_size = int(math.log(size, 2))
        self.convs, self.to_rgbs = nn.ModuleList(), nn.ModuleList()
        for _ in range(3, self.log_size + 1):
            self.convs.append(StyledConv(channels, channels, style_dim, upsample=True))
            self.convs.append(StyledConv(channels, channels, style_dim))
            self.to_rgbs.append(ToRGB(channels, style_dim))
        self.n_latent = self.log_size * 2 - 2

    def mean_latent(self, n_latent):
        latent_in = torch.randn(n_latent, self.style_dim, device=self.input.device)
        return self.style(latent_in).mean(0, keepdim=True)

    def forward(self, styles, return_latents=False, input_is_latent=False, randomize_noise=True):
        if not input_is_latent:
            styles = [self.style(s) for s in styles]
        latent = styles[0]
        if latent.ndim < 3:
            latent = latent.unsqueeze(1).repeat(1, self.n_latent, 1)
        out = self.input.repeat(latent.shape[0], 1, 1, 1)
        noise = None if randomize_noise else torch.zeros(1, 1, 1, 1)
        out = self.conv1(out, latent[:, 0], noise=noise)
        skip = self.to_rgb1(out, latent[:, 1])
        i = 1
        for conv1, conv2, to_rgb in zip(self.convs[::2], self.convs[1::2], self.to_rgbs):
            out = conv1(out, latent[:, i], noise=noise)
            out = conv2(out, latent[:, i + 1], noise=noise)
            skip = to_rgb(out, latent[:, i + 2], skip)
            i += 2
        image = skip
        return (image, latent) if return_latents else (image, None)


class BackboneEncoder(nn.Module):
    """ReStyle encoder: takes the input image concatenated with the current reconstruction."""

    def __init__(self, n_styles, style_dim, input_nc=6):
        super().__init__()
        self.n_styles, self.style_dim = n_styles, style_dim
        self.body = nn.Sequential(
            nn.Conv2d(input_nc, 16, 3, 2, 1), nn.PReLU(16),
            nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.PReLU(32),
            nn.AdaptiveAvgPool2d(1))
        self.styles = nn.Linear(32, n_styles * style_dim)

    def forward(self, x):
        feat = self.body(x).flatten(1)
        return self.styles(feat).view(-1, self.n_styles, self.style_dim)


class pSp(nn.Module):
    def __init__(self, opts, ckpt):
        super().__init__()
        self.opts = opts
        self.decoder = Generator(opts.output_size, opts.style_dim, n_mlp=4)
        self.n_styles = self.decoder.n_latent
        self.encoder = BackboneEncoder(self.n_styles, opts.style_dim, input_nc=opts.input_nc)
        self.face_pool = nn.AdaptiveAvgPool2d((opts.output_size, opts.output_size))
        self.decoder.load_state_dict(ckpt["g_ema"], strict=False)
        self.__load_latent_avg(ckpt)

    def forward(self, x, latent=None, resize=True, input_code=False, randomize_noise=True,
                return_latents=False, average_code=False):
        if input_code:
            codes = x
        else:
            codes = self.encoder(x)
            # residual step
            if x.shape[1] == 6 and latent is not None:
                # learn error with respect to previous iteration
                codes = codes + latent
            else:
                # first iteration is with respect to the avg latent code
                codes = codes + self.latent_avg.repeat(codes.shape[0], 1, 1)
        if average_code:
            input_is_latent = True
        else:
            input_is_latent = not input_code
        images, result_latent = self.decoder([codes], input_is_latent=input_is_latent,
                                             randomize_noise=randomize_noise,
                                             return_latents=return_latents)
        if resize:
            images = self.face_pool(images)
        return (images, result_latent) if return_latents else images

    def __load_latent_avg(self, ckpt, repeat=None):
        if "latent_avg" in ckpt:
            self.latent_avg = ckpt["latent_avg"]
            if repeat is not None:
                self.latent_avg = self.latent_avg.repeat(repeat, 1)
        else:
            self.latent_avg = None


class FeatureLoss(nn.Module):
    """Stand-in for LPIPS: distance in the feature space of a frozen conv net."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1))
        for p in self.net.parameters():
            p.requires_grad = False
        self.net.eval()

    def forward(self, y_hat, y):
        return F.mse_loss(self.net(y_hat), self.net(y))


class Coach:
    def __init__(self, opts, ckpt):
        self.opts = opts
        self.global_step = 0
        self.device = "cpu"
        self.net = pSp(self.opts, ckpt).to(self.device)

        # Estimate latent_avg via dense sampling if latent_avg is not available
        if self.net.latent_avg is None:
            self.net.latent_avg = self.net.decoder.mean_latent(int(self.opts.n_mean_latent))[0]

        # get the image corresponding to the latent average
        self.avg_image = self.net(self.net.latent_avg.unsqueeze(0), input_code=True,
                                  randomize_noise=False, return_latents=False,
                                  average_code=True)[0]
        self.avg_image = self.avg_image.to(self.device).float().detach()

        self.mse_loss = nn.MSELoss().to(self.device).eval()
        self.lpips_loss = FeatureLoss().to(self.device)
        self.optimizer = self.configure_optimizers()

    def configure_optimizers(self):
        params = list(self.net.encoder.parameters())
        if self.opts.train_decoder:
            params += list(self.net.decoder.parameters())
        return torch.optim.Adam(params, lr=self.opts.learning_rate)

    def calc_loss(self, x, y, y_hat, latent):
        loss_dict = {}
        loss_l2 = self.mse_loss(y_hat, y)
        loss_lpips = self.lpips_loss(y_hat, y)
        loss = loss_l2 * self.opts.l2_lambda + loss_lpips * self.opts.lpips_lambda
        loss_dict["loss_l2"] = float(loss_l2)
        loss_dict["loss_lpips"] = float(loss_lpips)
        loss_dict["loss"] = float(loss)
        return loss, loss_dict

    def perform_train_iteration_on_batch(self, x, y):
        y_hat, latent = None, None
        loss_dict = None
        for iter in range(self.opts.n_iters_per_batch):
            if iter == 0:
                avg_image_for_batch = self.avg_image.unsqueeze(0).repeat(x.shape[0], 1, 1, 1)
                x_input = torch.cat([x, avg_image_for_batch], dim=1)
                y_hat, latent = self.net.forward(x_input, latent=None, return_latents=True)
            else:
                y_hat_clone = y_hat.clone().detach().requires_grad_(True)
                latent_clone = latent.clone().detach().requires_grad_(True)
                x_input = torch.cat([x, y_hat_clone], dim=1)
                y_hat, latent = self.net.forward(x_input, latent=latent_clone, return_latents=True)
            loss, loss_dict = self.calc_loss(x, y, y_hat, latent)
            loss.backward()  # raises
        return y_hat, loss_dict

    def train(self, images):
        self.net.train()
        while self.global_step < self.opts.max_steps:
            for batch_idx in range(0, images.shape[0], self.opts.batch_size):
                x = images[batch_idx:batch_idx + self.opts.batch_size]
                y = x
                self.optimizer.zero_grad()
                y_hats, loss_dict = self.perform_train_iteration_on_batch(x, y)
                self.optimizer.step()
                if self.global_step % self.opts.board_interval == 0:
                    print("step {} {}".format(self.global_step, loss_dict))
                self.global_step += 1
                if self.global_step >= self.opts.max_steps:
                    break


def main():
    torch.manual_seed(0)
    opts = Namespace(output_size=16, style_dim=32, input_nc=6, learning_rate=1e-3,
                     train_decoder=False, n_iters_per_batch=3, l2_lambda=1.0,
                     lpips_lambda=0.8, batch_size=4, max_steps=6, board_interval=2,
                     n_mean_latent=2000, start_from_latent_avg=True)
    converted = Generator(opts.output_size, opts.style_dim, n_mlp=4)
    ckpt = {"g_ema": converted.state_dict()}
    images = torch.rand(16, 3, opts.output_size, opts.output_size) * 2 - 1
    coach = Coach(opts, ckpt)
    coach.train(images)


if __name__ == "__main__":
    main()
