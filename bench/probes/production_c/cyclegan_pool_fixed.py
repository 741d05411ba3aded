# expect: clean
# source: https://github.com/eriklindernoren/PyTorch-GAN/issues/71
import argparse
import itertools
import random
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=1, help="number of epochs of training")
parser.add_argument("--batches_per_epoch", type=int, default=3)
parser.add_argument("--batch_size", type=int, default=2, help="size of the batches")
parser.add_argument("--lr", type=float, default=0.0002, help="adam: learning rate")
parser.add_argument("--b1", type=float, default=0.5, help="adam: decay of first order momentum of gradient")
parser.add_argument("--b2", type=float, default=0.999, help="adam: decay of first order momentum of gradient")
parser.add_argument("--decay_epoch", type=int, default=1, help="epoch from which to start lr decay")
parser.add_argument("--img_size", type=int, default=16, help="size of image height/width")
parser.add_argument("--channels", type=int, default=3, help="number of image channels")
parser.add_argument("--n_residual_blocks", type=int, default=2, help="number of residual blocks in generator")
parser.add_argument("--lambda_cyc", type=float, default=10.0, help="cycle loss weight")
parser.add_argument("--lambda_id", type=float, default=5.0, help="identity loss weight")
opt = parser.parse_args([])


class ReplayBuffer:
    def __init__(self, max_size=50):
        assert max_size > 0, "Empty buffer or trying to create a black hole. Be careful."
        self.max_size = max_size
        self.data = []

    def push_and_pop(self, data):
        to_return = []
        for element in data:
            element = torch.unsqueeze(element, 0)
            if len(self.data) < self.max_size:
                self.data.append(element)
                to_return.append(element)
            else:
                if random.uniform(0, 1) > 0.5:
                    i = random.randint(0, self.max_size - 1)
                    to_return.append(self.data[i].clone())
                    self.data[i] = element
                else:
                    to_return.append(element)
        return torch.cat(to_return)


class LambdaLR:
    def __init__(self, n_epochs, offset, decay_start_epoch):
        self.n_epochs = n_epochs
        self.offset = offset
        self.decay_start_epoch = decay_start_epoch

    def step(self, epoch):
        return 1.0 - max(0, epoch + self.offset - self.decay_start_epoch) / (self.n_epochs - self.decay_start_epoch + 1)


def weights_init_normal(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight.data, 0.0, 0.02)


class ResidualBlock(nn.Module):
    def __init__(self, in_features):
        super().__init__()
        self.block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(in_features, in_features, 3), nn.InstanceNorm2d(in_features), nn.ReLU(inplace=True),
            nn.ReflectionPad2d(1), nn.Conv2d(in_features, in_features, 3), nn.InstanceNorm2d(in_features),
        )

    def forward(self, x):
        return x + self.block(x)


class GeneratorResNet(nn.Module):
    def __init__(self, channels, num_residual_blocks, base=16):
        super().__init__()
        model = [nn.ReflectionPad2d(channels), nn.Conv2d(channels, base, 2 * channels + 1), nn.InstanceNorm2d(base), nn.ReLU(inplace=True)]
        model += [nn.Conv2d(base, base * 2, 3, stride=2, padding=1), nn.InstanceNorm2d(base * 2), nn.ReLU(inplace=True)]
        model += [ResidualBlock(base * 2) for _ in range(num_residual_blocks)]
        model += [nn.Upsample(scale_factor=2), nn.Conv2d(base * 2, base, 3, stride=1, padding=1), nn.InstanceNorm2d(base), nn.ReLU(inplace=True)]
        model += [nn.ReflectionPad2d(channels), nn.Conv2d(base, channels, 2 * channels + 1), nn.Tanh()]
        self.model = nn.Sequential(*model)

    def forward(self, x):
        return self.model(x)


class Discriminator(nn.Module):
    def __init__(self, channels, img_size):
        super().__init__()
        self.output_shape = (1, img_size // 2 ** 2, img_size // 2 ** 2)

        def discriminator_block(in_filters, out_filters, normalize=True):
            layers = [nn.Conv2d(in_filters, out_filters, 4, stride=2, padding=1)]
            if normalize:
                layers.append(nn.InstanceNorm2d(out_filters))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *discriminator_block(channels, 16, normalize=False),
            *discriminator_block(16, 32),
            nn.ZeroPad2d((1, 0, 1, 0)),
            nn.Conv2d(32, 1, 4, padding=1),
        )

    def forward(self, img):
        return self.model(img)


# Losses
criterion_GAN = torch.nn.MSELoss()
criterion_cycle = torch.nn.L1Loss()
criterion_identity = torch.nn.L1Loss()

# Initialize generator and discriminator
torch.manual_seed(0)
random.seed(0)
G_AB = GeneratorResNet(opt.channels, opt.n_residual_blocks)
G_BA = GeneratorResNet(opt.channels, opt.n_residual_blocks)
D_A = Discriminator(opt.channels, opt.img_size)
D_B = Discriminator(opt.channels, opt.img_size)
for net in (G_AB, G_BA, D_A, D_B):
    net.apply(weights_init_normal)

# Optimizers
optimizer_G = torch.optim.Adam(itertools.chain(G_AB.parameters(), G_BA.parameters()), lr=opt.lr, betas=(opt.b1, opt.b2))
optimizer_D_A = torch.optim.Adam(D_A.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
optimizer_D_B = torch.optim.Adam(D_B.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

lr_scheduler_G = torch.optim.lr_scheduler.LambdaLR(optimizer_G, lr_lambda=LambdaLR(opt.n_epochs, 0, opt.decay_epoch).step)
lr_scheduler_D_A = torch.optim.lr_scheduler.LambdaLR(optimizer_D_A, lr_lambda=LambdaLR(opt.n_epochs, 0, opt.decay_epoch).step)
lr_scheduler_D_B = torch.optim.lr_scheduler.LambdaLR(optimizer_D_B, lr_lambda=LambdaLR(opt.n_epochs, 0, opt.decay_epoch).step)

# Buffers of previously generated samples
fake_A_buffer = ReplayBuffer()
fake_B_buffer = ReplayBuffer()


def unaligned_batches(n):
    for _ in range(n):
        yield {"A": torch.rand(opt.batch_size, opt.channels, opt.img_size, opt.img_size) * 2 - 1,
               "B": torch.rand(opt.batch_size, opt.channels, opt.img_size, opt.img_size) * 2 - 1}


def main():
    prev_time = time.time()
    for epoch in range(opt.n_epochs):
        for i, batch in enumerate(unaligned_batches(opt.batches_per_epoch)):
            real_A, real_B = batch["A"], batch["B"]
            valid = torch.ones((real_A.size(0), *D_A.output_shape))
            fake = torch.zeros((real_A.size(0), *D_A.output_shape))

            # ------------------
            #  Train Generators
            # ------------------
            G_AB.train()
            G_BA.train()
            optimizer_G.zero_grad()

            loss_identity = (criterion_identity(G_BA(real_A), real_A) + criterion_identity(G_AB(real_B), real_B)) / 2
            fake_B = G_AB(real_A)
            fake_A = G_BA(real_B)
            loss_GAN = (criterion_GAN(D_B(fake_B), valid) + criterion_GAN(D_A(fake_A), valid)) / 2
            loss_cycle = (criterion_cycle(G_BA(fake_B), real_A) + criterion_cycle(G_AB(fake_A), real_B)) / 2
            loss_G = loss_GAN + opt.lambda_cyc * loss_cycle + opt.lambda_id * loss_identity
            loss_G.backward()
            optimizer_G.step()

            # -----------------------
            #  Train Discriminator A
            # -----------------------
            optimizer_D_A.zero_grad()
            loss_real = criterion_GAN(D_A(real_A), valid)
            # Fake loss (on batch of previously generated samples)
            fake_A_ = fake_A_buffer.push_and_pop(fake_A.detach())
            loss_fake = criterion_GAN(D_A(fake_A_), fake)
            loss_D_A = (loss_real + loss_fake) / 2
            loss_D_A.backward()
            optimizer_D_A.step()

            # -----------------------
            #  Train Discriminator B
            # -----------------------
            optimizer_D_B.zero_grad()
            loss_real = criterion_GAN(D_B(real_B), valid)
            fake_B_ = fake_B_buffer.push_and_pop(fake_B.detach())
            loss_fake = criterion_GAN(D_B(fake_B_), fake)
            loss_D_B = (loss_real + loss_fake) / 2
            loss_D_B.backward()
            optimizer_D_B.step()

            loss_D = (loss_D_A + loss_D_B) / 2
            print("[Epoch %d/%d] [Batch %d/%d] [D loss: %f] [G loss: %f, adv: %f, cycle: %f, identity: %f] %.2fs"
                  % (epoch, opt.n_epochs, i, opt.batches_per_epoch, loss_D.item(), loss_G.item(),
                     loss_GAN.item(), loss_cycle.item(), loss_identity.item(), time.time() - prev_time))
            prev_time = time.time()

        lr_scheduler_G.step()
        lr_scheduler_D_A.step()
        lr_scheduler_D_B.step()


if __name__ == "__main__":
    main()
