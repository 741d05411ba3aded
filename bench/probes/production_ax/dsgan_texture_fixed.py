# expect: clean
# source: https://github.com/manuelfritsche/real-world-sr/issues/18
"""DSGAN (real-world super-resolution, "frequency separation") downscaling GAN trainer.

A residual generator maps bicubically downscaled images to the real-world LR domain; a
discriminator sees only the high frequencies (FilterHigh) of real and generated images.
The generator is trained with color (low-pass L1), texture (adversarial) and perceptual
losses. Separate Adam optimizers and LambdaLR decay schedulers, discriminator/generator
update frequencies, and a no-grad validation pass with PSNR. Synthetic data, CPU only.
"""
import argparse

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


def get_parser():
    parser = argparse.ArgumentParser(description='Train Downscaling Models')
    parser.add_argument('--crop_size', default=16, type=int, help='training images crop size')
    parser.add_argument('--batch_size', default=4, type=int, help='batch size used')
    parser.add_argument('--num_epochs', default=2, type=int, help='total train epoch number')
    parser.add_argument('--num_decay_epochs', default=1, type=int, help='number of epochs during which lr is decayed')
    parser.add_argument('--learning_rate', default=0.0002, type=float, help='learning rate')
    parser.add_argument('--adam_beta_1', default=0.5, type=float, help='beta_1 for adam optimizer of gen and disc')
    parser.add_argument('--val_interval', default=1, type=int, help='validation interval')
    parser.add_argument('--num_res_blocks', default=2, type=int, help='number of ResNet blocks')
    parser.add_argument('--wgan', dest='wgan', action='store_true', help='use WGAN-GP instead of DCGAN')
    parser.add_argument('--no_highpass', dest='highpass', action='store_false',
                        help='if activated then the highpass filter before the discriminator is omitted')
    parser.add_argument('--kernel_size', default=5, type=int, help='kernel size used in transformation for discriminators')
    parser.add_argument('--no_per_loss', dest='use_per_loss', action='store_false', help='no perceptual loss')
    parser.add_argument('--disc_freq', default=1, type=int, help='number of steps until a discriminator updated is made')
    parser.add_argument('--gen_freq', default=1, type=int, help='number of steps until a generator updated is made')
    parser.add_argument('--w_col', default=1, type=float, help='weight of color loss')
    parser.add_argument('--w_tex', default=0.005, type=float, help='weight of texture loss')
    parser.add_argument('--w_per', default=0.01, type=float, help='weight of perceptual loss')
    return parser


class TrainDataset(Dataset):
    """Pairs (bicubic-downscaled source crop, real-world LR crop with sensor noise)."""

    def __init__(self, n_images, crop_size, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.clean = torch.rand(n_images, 3, crop_size, crop_size, generator=g)
        noise = 0.08 * torch.randn(n_images, 3, crop_size, crop_size, generator=g)
        self.real = (torch.rand(n_images, 3, crop_size, crop_size, generator=g) + noise).clamp(0, 1)

    def __len__(self):
        return len(self.clean)

    def __getitem__(self, idx):
        return self.clean[idx], self.real[idx]


class ValDataset(TrainDataset):
    def __getitem__(self, idx):
        return self.clean[idx], self.real[idx], (self.clean[idx] + 0.05 * self.real[idx]).clamp(0, 1)


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x):
        residual = self.conv2(self.prelu(self.conv1(x)))
        return x + residual


class Generator(nn.Module):
    def __init__(self, n_res_blocks=8):
        super(Generator, self).__init__()
        self.block_input = nn.Sequential(nn.Conv2d(3, 32, kernel_size=3, padding=1), nn.PReLU())
        self.res_blocks = nn.ModuleList([ResidualBlock(32) for _ in range(n_res_blocks)])
        self.block_output = nn.Conv2d(32, 3, kernel_size=3, padding=1)

    def forward(self, x):
        block = self.block_input(x)
        for res_block in self.res_blocks:
            block = res_block(block)
        return torch.sigmoid(self.block_output(block))


class FilterLow(nn.Module):
    def __init__(self, recursions=1, kernel_size=5, stride=1, padding=True, include_pad=True):
        super(FilterLow, self).__init__()
        pad = int((kernel_size - 1) / 2) if padding else 0
        self.filter = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=pad, count_include_pad=include_pad)
        self.recursions = recursions

    def forward(self, img):
        for i in range(self.recursions):
            img = self.filter(img)
        return img


class FilterHigh(nn.Module):
    def __init__(self, recursions=1, kernel_size=5, stride=1, include_pad=True, normalize=True):
        super(FilterHigh, self).__init__()
        self.filter_low = FilterLow(recursions=1, kernel_size=kernel_size, stride=stride, include_pad=include_pad)
        self.recursions = recursions
        self.normalize = normalize

    def forward(self, img):
        if self.recursions > 1:
            for i in range(self.recursions - 1):
                img = self.filter_low(img)
        img = img - self.filter_low(img)
        return 0.5 + img * 0.5 if self.normalize else img


class DiscriminatorBasic(nn.Module):
    def __init__(self, n_input_channels=3):
        super(DiscriminatorBasic, self).__init__()
        self.net = nn.Sequential(
            nn.Conv2d(n_input_channels, 32, kernel_size=5, padding=2), nn.LeakyReLU(0.2),
            nn.Conv2d(32, 64, kernel_size=5, padding=2), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
            nn.Conv2d(64, 128, kernel_size=5, padding=2), nn.BatchNorm2d(128), nn.LeakyReLU(0.2),
            nn.Conv2d(128, 1, kernel_size=1))

    def forward(self, x):
        return self.net(x)


class Discriminator(nn.Module):
    def __init__(self, recursions=1, stride=1, kernel_size=5, wgan=False, highpass=True):
        super(Discriminator, self).__init__()
        self.filter = FilterHigh(recursions=recursions, stride=stride, kernel_size=kernel_size,
                                 include_pad=False) if highpass else None
        self.net = DiscriminatorBasic(n_input_channels=3)
        self.wgan = wgan

    def forward(self, x):
        if self.filter is not None:
            x = self.filter(x)
        x = self.net(x)
        return x if self.wgan else torch.sigmoid(x)


def generator_loss(labels, wasserstein=False):
    if wasserstein:
        return torch.mean(-labels)
    return torch.mean(-torch.log(labels + 1e-8))


def discriminator_loss(real, fake, wasserstein=False, grad_penalty=None):
    if wasserstein:
        return -real.mean() + fake.mean() + grad_penalty
    return -torch.log(real + 1e-8).mean() - torch.log(1 - fake + 1e-8).mean()


class PerceptualLoss(nn.Module):
    """Frozen random conv feature extractor standing in for LPIPS."""

    def __init__(self):
        super(PerceptualLoss, self).__init__()
        self.loss_network = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1))
        for param in self.loss_network.parameters():
            param.requires_grad = False
        self.mse_loss = nn.MSELoss()

    def forward(self, x, y):
        return self.mse_loss(self.loss_network(x), self.loss_network(y))


class GeneratorLoss(nn.Module):
    def __init__(self, kernel_size=5, use_per_loss=True, wgan=False, w_col=1, w_tex=0.001, w_per=0.1, **kwargs):
        super(GeneratorLoss, self).__init__()
        self.pixel_loss = nn.L1Loss()
        self.color_filter = FilterLow(kernel_size=kernel_size, padding=False)
        self.perceptual_loss = PerceptualLoss()
        self.use_perceptual_loss, self.wasserstein = use_per_loss, wgan
        self.w_col, self.w_tex, self.w_per = w_col, w_tex, w_per
        self.last_tex_loss = self.last_per_loss = self.last_col_loss = 0

    def forward(self, tex_labels, out_images, target_images):
        self.last_tex_loss = generator_loss(tex_labels, wasserstein=self.wasserstein)
        self.last_per_loss = self.perceptual_loss(out_images, target_images)
        self.last_col_loss = self.color_loss(out_images, target_images)
        loss = self.w_col * self.last_col_loss + self.w_tex * self.last_tex_loss
        if self.use_perceptual_loss:
            loss += self.w_per * self.last_per_loss
        return loss

    def color_loss(self, x, y):
        return self.pixel_loss(self.color_filter(x), self.color_filter(y))

    def rgb_loss(self, x, y):
        return self.pixel_loss(x.mean(3).mean(2), y.mean(3).mean(2))


def validate(model_g, g_loss_module, val_loader, epoch):
    model_g.eval()
    mse_sum = psnr_sum = col_loss_sum = 0
    with torch.no_grad():
        for input_img, disc_img, target_img in val_loader:
            fake_img = torch.clamp(model_g(input_img), min=0, max=1)
            mse = ((fake_img - target_img) ** 2).mean().data
            mse_sum += mse
            psnr_sum += -10 * torch.log10(mse)
            col_loss_sum += g_loss_module.color_loss(fake_img, target_img)
    n = len(val_loader.dataset)
    print('[%d] val mse %.5f psnr %.3f color %.5f' % (epoch, mse_sum / n, psnr_sum / n, col_loss_sum / n))
    model_g.train()


def main():
    opt = get_parser().parse_args([])
    torch.manual_seed(0)
    train_loader = DataLoader(TrainDataset(16, opt.crop_size), batch_size=opt.batch_size, shuffle=True)
    val_loader = DataLoader(ValDataset(4, opt.crop_size, seed=1), batch_size=1, shuffle=False)

    model_g = Generator(n_res_blocks=opt.num_res_blocks)
    model_d = Discriminator(kernel_size=opt.kernel_size, wgan=opt.wgan, highpass=opt.highpass)
    g_loss_module = GeneratorLoss(**vars(opt))

    optimizer_g = optim.Adam(model_g.parameters(), lr=opt.learning_rate, betas=[opt.adam_beta_1, 0.999])
    optimizer_d = optim.Adam(model_d.parameters(), lr=opt.learning_rate, betas=[opt.adam_beta_1, 0.999])
    start_decay = opt.num_epochs - opt.num_decay_epochs
    scheduler_rule = lambda e: 1.0 if e < start_decay else 1.0 - max(0.0, float(e - start_decay) / opt.num_decay_epochs)
    scheduler_g = optim.lr_scheduler.LambdaLR(optimizer_g, lr_lambda=scheduler_rule)
    scheduler_d = optim.lr_scheduler.LambdaLR(optimizer_d, lr_lambda=scheduler_rule)
    start_epoch, iteration = 1, 1

    for epoch in range(start_epoch, opt.num_epochs + 1):
        model_g.train()
        model_d.train()
        for input_img, disc_img in train_loader:
            iteration += 1
            # Estimate scores of fake and real images
            fake_img = model_g(input_img)
            real_tex = model_d(disc_img)
            fake_tex = model_d(fake_img)

            # Update Discriminator network
            if iteration % opt.disc_freq == 0:
                if opt.wgan:
                    rand = torch.rand(1).item()
                    sample = rand * disc_img + (1 - rand) * fake_img
                    gradient = torch.autograd.grad(model_d(sample).mean(), sample, create_graph=True)[0]
                    grad_pen = 10 * (gradient.norm() - 1) ** 2
                else:
                    grad_pen = None
                model_d.zero_grad()
                d_tex_loss = discriminator_loss(real_tex, fake_tex, wasserstein=opt.wgan, grad_penalty=grad_pen)
                d_tex_loss.backward(retain_graph=True)
                optimizer_d.step()

            # Update Generator network
            if iteration % opt.gen_freq == 0:
                model_g.zero_grad()
                fake_tex = model_d(fake_img)
                g_loss = g_loss_module(fake_tex, fake_img, input_img)
                assert not torch.isnan(g_loss), 'Generator loss returns NaN values'
                g_loss.backward()
                optimizer_g.step()

            rgb_loss = g_loss_module.rgb_loss(fake_img, input_img)
            print('[%d/%d] it %d rgb %.4f real %.3f fake %.3f' % (epoch, opt.num_epochs, iteration, rgb_loss.item(),
                                                                  real_tex.mean().item(), fake_tex.mean().item()))
        scheduler_d.step()
        scheduler_g.step()
        if epoch % opt.val_interval == 0:
            validate(model_g, g_loss_module, val_loader, epoch)


if __name__ == '__main__':
    main()
