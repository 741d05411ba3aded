# expect: clean
# source: https://github.com/MC-E/Deep-Generalized-Unfolding-Networks-for-Image-Restoration/issues/6
"""DGUNet-style deep generalized unfolding network for image deblurring.

Each stage unrolls one proximal-gradient iteration: a learned degradation
operator and its adjoint give the gradient step (with a learnable step size),
and a small encoder/decoder acts as the proximal (denoising) operator.  The
network returns the restored image of every stage (last stage first) and is
trained with Charbonnier + edge losses summed over stages, Adam, and a
gradual-warmup cosine schedule.  Synthetic GoPro-like pairs: sharp random
textures blurred with a fixed motion kernel plus noise.
"""
import random
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

opt = SimpleNamespace(
    MODEL=SimpleNamespace(MODE="Deblurring", SESSION="DGUNet"),
    OPTIM=SimpleNamespace(BATCH_SIZE=4, NUM_EPOCHS=3, LR_INITIAL=2e-4, LR_MIN=1e-6),
    TRAINING=SimpleNamespace(VAL_AFTER_EVERY=1, TRAIN_PS=32, VAL_PS=32, N_TRAIN=12, N_VAL=4),
    NETWORK=SimpleNamespace(N_FEAT=16, DEPTH=3),
)


# ---------------------------------------------------------------- losses
class CharbonnierLoss(nn.Module):
    def __init__(self, eps=1e-3):
        super().__init__()
        self.eps = eps

    def forward(self, x, y):
        diff = x - y
        return torch.mean(torch.sqrt(diff * diff + self.eps * self.eps))


class EdgeLoss(nn.Module):
    def __init__(self):
        super().__init__()
        k = torch.tensor([[.05, .25, .4, .25, .05]])
        self.register_buffer("kernel", torch.matmul(k.t(), k).unsqueeze(0).repeat(3, 1, 1, 1))
        self.loss = CharbonnierLoss()

    def conv_gauss(self, img):
        n_channels, _, kw, kh = self.kernel.shape
        img = F.pad(img, (kw // 2, kh // 2, kw // 2, kh // 2), mode="replicate")
        return F.conv2d(img, self.kernel, groups=n_channels)

    def laplacian_kernel(self, current):
        filtered = self.conv_gauss(current)
        down = filtered[:, :, ::2, ::2]
        new_filter = torch.zeros_like(filtered)
        new_filter[:, :, ::2, ::2] = down * 4
        filtered = self.conv_gauss(new_filter)
        return current - filtered

    def forward(self, x, y):
        return self.loss(self.laplacian_kernel(x), self.laplacian_kernel(y))


# ---------------------------------------------------------------- network
def conv(in_ch, out_ch, k=3, bias=False):
    return nn.Conv2d(in_ch, out_ch, k, padding=k // 2, bias=bias)


class CAB(nn.Module):
    """Channel attention block."""

    def __init__(self, n_feat, reduction=4):
        super().__init__()
        self.body = nn.Sequential(conv(n_feat, n_feat), nn.PReLU(), conv(n_feat, n_feat))
        self.ca = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(n_feat, n_feat // reduction, 1),
                                nn.ReLU(inplace=True), nn.Conv2d(n_feat // reduction, n_feat, 1), nn.Sigmoid())

    def forward(self, x):
        res = self.body(x)
        return res * self.ca(res) + x


class ProximalUNet(nn.Module):
    def __init__(self, n_feat):
        super().__init__()
        self.head = conv(3, n_feat)
        self.enc1 = CAB(n_feat)
        self.down = nn.Conv2d(n_feat, 2 * n_feat, 3, stride=2, padding=1)
        self.enc2 = CAB(2 * n_feat)
        self.up = nn.ConvTranspose2d(2 * n_feat, n_feat, 2, stride=2)
        self.dec1 = CAB(n_feat)
        self.tail = conv(n_feat, 3)

    def forward(self, x):
        f1 = self.enc1(self.head(x))
        f2 = self.enc2(self.down(f1))
        out = self.dec1(self.up(f2) + f1)
        return x + self.tail(out)


class GradientDescentModule(nn.Module):
    """Learned degradation operator phi and its adjoint phi^T."""

    def __init__(self):
        super().__init__()
        self.phi = nn.Sequential(conv(3, 8), nn.PReLU(), conv(8, 3))
        self.phit = nn.Sequential(conv(3, 8), nn.PReLU(), conv(8, 3))
        self.r = nn.Parameter(torch.tensor([0.5]))

    def forward(self, x, y):
        return x - self.r * self.phit(self.phi(x) - y)


class DGUNet(nn.Module):
    def __init__(self, n_feat=16, depth=3):
        super().__init__()
        self.depth = depth
        self.grad_steps = nn.ModuleList([GradientDescentModule() for _ in range(depth)])
        self.prox = nn.ModuleList([ProximalUNet(n_feat) for _ in range(depth)])

    def forward(self, img):
        x = img
        outputs = []
        for stage in range(self.depth):
            x = self.grad_steps[stage](x, img)
            x = self.prox[stage](x)
            outputs.append(x)
        return outputs[::-1]


# ---------------------------------------------------------------- data / utils
class SyntheticBlurDataset(Dataset):
    def __init__(self, n, ps, seed):
        g = torch.Generator().manual_seed(seed)
        sharp = torch.rand(n, 3, ps, ps, generator=g)
        kernel = torch.zeros(3, 1, 5, 5)
        kernel[:, 0, 2, :] = 0.2  # horizontal motion blur
        blurred = F.conv2d(F.pad(sharp, (2, 2, 2, 2), mode="replicate"), kernel, groups=3)
        self.target = sharp
        self.input = (blurred + 0.01 * torch.randn(blurred.shape, generator=g)).clamp(0, 1)

    def __len__(self):
        return self.target.shape[0]

    def __getitem__(self, idx):
        return self.target[idx], self.input[idx], idx


def torchPSNR(tar_img, prd_img):
    imdff = torch.clamp(prd_img, 0, 1) - torch.clamp(tar_img, 0, 1)
    rmse = (imdff ** 2).mean().sqrt()
    return 20 * torch.log10(1 / rmse)


class GradualWarmupScheduler(optim.lr_scheduler.LRScheduler):
    def __init__(self, optimizer, multiplier, total_epoch, after_scheduler=None):
        self.multiplier = multiplier
        self.total_epoch = total_epoch
        self.after_scheduler = after_scheduler
        self.finished = False
        super().__init__(optimizer)

    def get_lr(self):
        if self.last_epoch > self.total_epoch:
            if self.after_scheduler:
                if not self.finished:
                    self.after_scheduler.base_lrs = [base_lr * self.multiplier for base_lr in self.base_lrs]
                    self.finished = True
                return self.after_scheduler.get_last_lr()
            return [base_lr * self.multiplier for base_lr in self.base_lrs]
        return [base_lr * ((self.multiplier - 1.) * self.last_epoch / self.total_epoch + 1.)
                for base_lr in self.base_lrs]

    def step(self, epoch=None):
        if self.finished and self.after_scheduler:
            self.after_scheduler.step()
            self._last_lr = self.after_scheduler.get_last_lr()
        else:
            super().step()


# ---------------------------------------------------------------- trainer
class Trainer:
    def __init__(self, opt):
        self.opt = opt
        self.model = DGUNet(opt.NETWORK.N_FEAT, opt.NETWORK.DEPTH)
        self.optimizer = optim.Adam(self.model.parameters(), lr=opt.OPTIM.LR_INITIAL, betas=(0.9, 0.999), eps=1e-8)
        warmup_epochs = 1
        scheduler_cosine = optim.lr_scheduler.CosineAnnealingLR(
            self.optimizer, opt.OPTIM.NUM_EPOCHS - warmup_epochs, eta_min=opt.OPTIM.LR_MIN)
        self.scheduler = GradualWarmupScheduler(self.optimizer, multiplier=1, total_epoch=warmup_epochs,
                                                after_scheduler=scheduler_cosine)
        self.criterion_char = CharbonnierLoss()
        self.criterion_edge = EdgeLoss()
        self.train_loader = DataLoader(SyntheticBlurDataset(opt.TRAINING.N_TRAIN, opt.TRAINING.TRAIN_PS, 1),
                                       batch_size=opt.OPTIM.BATCH_SIZE, shuffle=True, drop_last=False)
        self.val_loader = DataLoader(SyntheticBlurDataset(opt.TRAINING.N_VAL, opt.TRAINING.VAL_PS, 2),
                                     batch_size=4, shuffle=False)
        self.best_psnr = 0.0
        self.best_epoch = 0
        self.best_state = None

    def compute_loss(self, restored, target):
        # Compute loss at each stage
        loss_char = sum([self.criterion_char(restored[j], target) for j in range(len(restored))])
        loss_edge = sum([self.criterion_edge(restored[j], target) for j in range(len(restored))])
        return loss_char + (0.05 * loss_edge)

    def train_step(self, data):
        for param in self.model.parameters():
            param.grad = None
        target, input_ = data[0], data[1]
        restored = self.model(input_)
        loss = self.compute_loss(restored, target)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        psnr_val_rgb = []
        for data_val in self.val_loader:
            target, input_ = data_val[0], data_val[1]
            restored = self.model(input_)[0]
            for res, tar in zip(restored, target):
                psnr_val_rgb.append(torchPSNR(res, tar))
        return torch.stack(psnr_val_rgb).mean().item()

    def fit(self):
        for epoch in range(1, self.opt.OPTIM.NUM_EPOCHS + 1):
            epoch_start_time = time.time()
            epoch_loss = 0.0
            self.model.train()
            for data in self.train_loader:
                epoch_loss += self.train_step(data)
            if epoch % self.opt.TRAINING.VAL_AFTER_EVERY == 0:
                psnr = self.evaluate()
                if psnr > self.best_psnr:
                    self.best_psnr, self.best_epoch = psnr, epoch
                    self.best_state = {k: v.clone() for k, v in self.model.state_dict().items()}
                print("[epoch %d PSNR: %.4f --- best_epoch %d Best_PSNR %.4f]"
                      % (epoch, psnr, self.best_epoch, self.best_psnr))
            self.scheduler.step()
            print("Epoch: {}\tTime: {:.4f}\tLoss: {:.4f}\tLearningRate {:.6f}".format(
                epoch, time.time() - epoch_start_time, epoch_loss, self.scheduler.get_last_lr()[0]))


def main():
    random.seed(1234)
    np.random.seed(1234)
    torch.manual_seed(1234)
    print("===> Start Epoch {} End Epoch {}".format(1, opt.OPTIM.NUM_EPOCHS + 1))
    trainer = Trainer(opt)
    trainer.fit()


if __name__ == "__main__":
    main()
