# expect: inplace_version
# source: https://github.com/mtics/deep-photo-enhancer/issues/9
"""Deep Photo Enhancer, 2-Way GAN training (CycleGAN-style, WGAN-GP with adaptive weighting).

Two U-Net generators with a global-feature branch map between the "input" photo domain X and
the "expert retouched" domain Y; two discriminators score each domain.  The discriminators are
updated every batch, the generators every `g_every` batches, and PSNR is evaluated on a held
out set at the end.  Images are synthetic and shrunk to 64x64 so the run fits on a CPU.
"""
import itertools
from datetime import datetime
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch import autograd
from torch.autograd import Variable

# libs/constant.py
Tensor_gpu = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor
Tensor = torch.FloatTensor
CFG = SimpleNamespace(SIZE=64, BATCH_SIZE=2, LEARNING_RATE=1e-5, BETA1=0.5, BETA2=0.999, LAMBDA=10,
                      ALPHA=1000, DECAY_RATE=0.5, NUM_EPOCHS_TRAIN=1, NUM_TRAIN=6, NUM_TEST=4,
                      G_EVERY=50, CLIP_VALUE=1e8)


# libs/model.py
class Generator(nn.Module):
    def __init__(self, size=64):
        super(Generator, self).__init__()
        self.feat = size // 16
        self.conv1 = nn.Sequential(nn.Conv2d(3, 16, 5, stride=1, padding=2), nn.SELU(inplace=True), nn.BatchNorm2d(16))
        self.conv2 = nn.Sequential(nn.Conv2d(16, 16, 5, stride=2, padding=2), nn.SELU(inplace=True), nn.BatchNorm2d(16))
        self.conv3 = nn.Sequential(nn.Conv2d(16, 32, 5, stride=2, padding=2), nn.SELU(inplace=True), nn.BatchNorm2d(32))
        self.conv4 = nn.Sequential(nn.Conv2d(32, 32, 5, stride=2, padding=2), nn.SELU(inplace=True), nn.BatchNorm2d(32))
        # the output of this layer we need layers for global features
        self.conv5 = nn.Sequential(nn.Conv2d(32, 32, 5, stride=2, padding=2), nn.SELU(inplace=True), nn.BatchNorm2d(32))
        # convs for global features
        self.conv51 = nn.Conv2d(32, 32, 5, stride=2, padding=2)
        self.conv52 = nn.Conv2d(32, 32, 5, stride=2, padding=2)
        self.conv53 = nn.Conv2d(32, 32, 1, stride=1, padding=0)
        self.fc = nn.Sequential(nn.Linear(1, 1), nn.SELU(inplace=True), nn.Linear(1, 1))
        # the global features are concatenated to the feature map after this layer
        self.conv6 = nn.Conv2d(32, 32, 5, stride=1, padding=2)
        self.conv7 = nn.Conv2d(64, 32, 5, stride=1, padding=2)
        # deconvolutional layers
        self.dconv1 = nn.Sequential(nn.SELU(inplace=True), nn.BatchNorm2d(32), nn.ConvTranspose2d(32, 32, 4, stride=2, padding=1))
        self.dconv2 = nn.Sequential(nn.SELU(inplace=True), nn.BatchNorm2d(64), nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1))
        self.dconv3 = nn.Sequential(nn.SELU(inplace=True), nn.BatchNorm2d(64), nn.ConvTranspose2d(64, 16, 4, stride=2, padding=1))
        self.dconv4 = nn.Sequential(nn.SELU(inplace=True), nn.BatchNorm2d(32), nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1))
        # final convolutional layers
        self.conv8 = nn.Sequential(nn.SELU(inplace=True), nn.BatchNorm2d(32), nn.Conv2d(32, 16, 5, stride=1, padding=2))
        self.conv9 = nn.Sequential(nn.SELU(inplace=True), nn.BatchNorm2d(16), nn.Conv2d(16, 3, 5, stride=1, padding=2))

    def forward(self, x):
        x0 = self.conv1(x)
        x1 = self.conv2(x0)
        x2 = self.conv3(x1)
        x3 = self.conv4(x2)
        x4 = self.conv5(x3)
        # convolutions for global features
        x53 = self.conv53(self.conv52(self.conv51(x4)))
        x53 = self.fc(x53)
        x53_temp = torch.cat([x53] * self.feat, dim=2)
        x53_temp = torch.cat([x53_temp] * self.feat, dim=3)
        x5 = self.conv6(x4)
        x5 = self.conv7(torch.cat([x5, x53_temp], dim=1))
        xd = self.dconv1(x5)
        xd = self.dconv2(torch.cat([xd, x3], dim=1))
        xd = self.dconv3(torch.cat([xd, x2], dim=1))
        xd = self.dconv4(torch.cat([xd, x1], dim=1))
        xd = self.conv8(torch.cat([xd, x0], dim=1))
        xd = self.conv9(xd)
        # Residuals
        xd = xd + x
        return xd


class Discriminator(nn.Module):
    def __init__(self, size=64):
        super(Discriminator, self).__init__()
        def block(i, o, s):
            return nn.Sequential(nn.Conv2d(i, o, 5, stride=s, padding=2), nn.LeakyReLU(inplace=True), nn.InstanceNorm2d(o))
        self.conv1 = block(3, 16, 1)
        self.conv2 = block(16, 16, 2)
        self.conv3 = block(16, 32, 2)
        self.conv4 = block(32, 32, 2)
        self.conv5 = block(32, 32, 2)
        self.conv6 = block(32, 32, 2)
        self.conv7 = nn.Sequential(nn.Conv2d(32, 1, size // 32), nn.LeakyReLU(inplace=True))

    def forward(self, x):
        x = self.conv3(self.conv2(self.conv1(x)))
        x = self.conv6(self.conv5(self.conv4(x)))
        return self.conv7(x)


class ConcatDataset(torch.utils.data.Dataset):
    def __init__(self, *datasets):
        self.datasets = datasets

    def __getitem__(self, i):
        return tuple(d[i] for d in self.datasets)

    def __len__(self):
        return min(len(d) for d in self.datasets)


# libs/compute.py
def data_loader(cfg):
    """Synthetic stand-in for the MIT-Adobe FiveK ImageFolders (input / Expert-C)."""
    g = torch.Generator().manual_seed(0)
    def folder(n):
        imgs = torch.rand(n, 3, cfg.SIZE, cfg.SIZE, generator=g)
        return torch.utils.data.TensorDataset(imgs, torch.zeros(n, dtype=torch.long))
    trainset_1_gt, trainset_2_inp = folder(cfg.NUM_TRAIN), folder(cfg.NUM_TRAIN)
    testset_gt, testset_inp = folder(cfg.NUM_TEST), folder(cfg.NUM_TEST)
    train_loader_cross = torch.utils.data.DataLoader(ConcatDataset(trainset_2_inp, trainset_1_gt),
                                                     batch_size=cfg.BATCH_SIZE, shuffle=True, generator=g)
    test_loader = torch.utils.data.DataLoader(ConcatDataset(testset_gt, testset_inp),
                                              batch_size=cfg.BATCH_SIZE, shuffle=False)
    return train_loader_cross, test_loader


def set_requires_grad(nets, requires_grad=False):
    for net in nets:
        for param in net.parameters():
            param.requires_grad = requires_grad


def computeGradientPenaltyFor1WayGAN(D, realSample, fakeSample):
    alpha = Tensor_gpu(np.random.random((realSample.shape)))
    interpolates = (alpha * realSample + ((1 - alpha) * fakeSample)).requires_grad_(True)
    dInterpolation = D(interpolates)
    fakeOutput = Variable(Tensor_gpu(realSample.shape[0], 1, 1, 1).fill_(1.0), requires_grad=False)
    gradients = autograd.grad(outputs=dInterpolation, inputs=interpolates, grad_outputs=fakeOutput,
                              create_graph=True, retain_graph=True, only_inputs=True)[0]
    ## Use Adadpative weighting scheme
    gradients = gradients.view(gradients.size(0), -1)
    maxVals = []
    normGradients = gradients.norm(2, dim=1) - 1
    for i in range(len(normGradients)):
        if (normGradients[i] > 0):
            maxVals.append(Variable(normGradients[i].type(Tensor)).detach().numpy())
        else:
            maxVals.append(0)
    return np.mean(maxVals)


def computeAdversarialLosses(dx, dx1, dy, dy1):
    ad = torch.mean(dx) - torch.mean(dx1) + torch.mean(dy) - torch.mean(dy1)
    ag = torch.mean(dx1) + torch.mean(dy1)
    return ad, ag


def computeIdentityMappingLoss(x, x1, y, y1):
    criterion = nn.MSELoss()
    return criterion(x, y1).mean() + criterion(y, x1).mean()


def computeCycleConsistencyLoss(x, x2, y, y2):
    criterion = nn.MSELoss()
    return criterion(x, y2).mean() + criterion(y, x2).mean()


def computeDiscriminatorLossFor2WayGan(ad, penalty, cfg):
    return ad - cfg.LAMBDA * penalty


def computeGeneratorLossFor2WayGan(ag, i_loss, c_loss, cfg):
    return -ag + cfg.ALPHA * i_loss + 10 * cfg.ALPHA * c_loss


def adjustLearningRate(learning_rate, decay_rate, epoch_num):
    return learning_rate / (1 + decay_rate * epoch_num)


# 2WayGAN_Train.py
class TwoWayGANTrainer(object):
    def __init__(self, cfg):
        self.cfg = cfg
        self.generator_xy, self.generator_yx = Generator(cfg.SIZE), Generator(cfg.SIZE)
        self.discriminator_x, self.discriminator_y = Discriminator(cfg.SIZE), Discriminator(cfg.SIZE)
        betas = (cfg.BETA1, cfg.BETA2)
        self.optimizer_g_xy = optim.Adam(self.generator_xy.parameters(), lr=cfg.LEARNING_RATE, betas=betas)
        self.optimizer_g_yx = optim.Adam(self.generator_yx.parameters(), lr=cfg.LEARNING_RATE, betas=betas)
        self.optimizer_dx = optim.Adam(self.discriminator_x.parameters(), lr=cfg.LEARNING_RATE, betas=betas)
        self.optimizer_dy = optim.Adam(self.discriminator_y.parameters(), lr=cfg.LEARNING_RATE, betas=betas)
        self.optimizers = [self.optimizer_g_xy, self.optimizer_g_yx, self.optimizer_dx, self.optimizer_dy]
        self.batches_done = 0
        self.log = []

    def adjust_lr(self, epoch):
        for opt in self.optimizers:
            for param_group in opt.param_groups:
                param_group['lr'] = adjustLearningRate(self.cfg.LEARNING_RATE, epoch_num=epoch,
                                                       decay_rate=self.cfg.DECAY_RATE)

    def train_step(self, x, y):
        cfg = self.cfg
        self.generator_xy.train()
        self.generator_yx.train()

        # TRAIN DISCRIMINATOR
        self.optimizer_dx.zero_grad()
        self.optimizer_dy.zero_grad()
        y1 = self.generator_xy(x)  # Y'
        x1 = self.generator_yx(y)  # X'
        dy = self.discriminator_y(y)  # D_Y
        dy1 = self.discriminator_y(y1)  # D_Y'
        dx = self.discriminator_x(x)  # D_X
        dx1 = self.discriminator_x(x1)  # D_X'
        set_requires_grad([self.discriminator_x, self.discriminator_y], True)

        ad, ag = computeAdversarialLosses(dx, dx1, dy, dy1)
        gradient_penalty = computeGradientPenaltyFor1WayGAN(self.discriminator_x, x.data, x1.data) + \
            computeGradientPenaltyFor1WayGAN(self.discriminator_y, y.data, y1.data)
        d_loss = computeDiscriminatorLossFor2WayGan(ad, gradient_penalty, cfg)
        d_loss.backward(retain_graph=True)
        torch.nn.utils.clip_grad_value_(itertools.chain(self.discriminator_y.parameters(),
                                                        self.discriminator_x.parameters()), cfg.CLIP_VALUE)
        self.optimizer_dx.step()
        self.optimizer_dy.step()

        # TRAIN GENERATOR
        g_loss = i_loss = c_loss = None
        if self.batches_done % cfg.G_EVERY == 0:
            self.optimizer_g_xy.zero_grad()
            self.optimizer_g_yx.zero_grad()
            y1 = self.generator_xy(x)  # Y'
            x1 = self.generator_yx(y)  # X'
            x2 = self.generator_yx(y1)  # X''
            y2 = self.generator_xy(x1)  # Y''
            i_loss = computeIdentityMappingLoss(x, x1, y, y1)
            c_loss = computeCycleConsistencyLoss(x, x2, y, y2)
            g_loss = computeGeneratorLossFor2WayGan(ag, i_loss, c_loss, cfg)
            g_loss.backward(retain_graph=True)  # raises
            self.optimizer_g_xy.step()
            self.optimizer_g_yx.step()

        self.batches_done += 1
        return {'d_loss': d_loss.item(), 'g_loss': None if g_loss is None else g_loss.item(),
                'ad': ad.item(), 'ag': ag.item(), 'gp': float(gradient_penalty)}

    def evaluate(self, test_loader):
        criterion = nn.MSELoss()
        psnrAvg = 0.0
        self.generator_xy.eval()
        with torch.no_grad():
            for j, (gt, data) in enumerate(test_loader, 0):
                x, y = Variable(data[0].type(Tensor_gpu)), Variable(gt[0].type(Tensor_gpu))
                loss = criterion(self.generator_xy(x), y)
                psnrAvg += (10 * torch.log10(1 / loss)).item()
        return psnrAvg / len(test_loader)


def main():
    start_time = datetime.now()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    np.random.seed(0)
    trainer = TwoWayGANTrainer(CFG)
    trainLoader_cross, testLoader = data_loader(CFG)
    for epoch in range(CFG.NUM_EPOCHS_TRAIN):
        trainer.adjust_lr(epoch)
        for i, (data, gt1) in enumerate(trainLoader_cross, 0):
            x = Variable(data[0].type(Tensor_gpu))  # X
            y = Variable(gt1[0].type(Tensor_gpu))  # Y
            stats = trainer.train_step(x, y)
            trainer.log.append(stats)
            print("[Epoch %d/%d] [Batch %d/%d] [D loss: %f] [AD: %f] [AG: %f]" % (
                epoch + 1, CFG.NUM_EPOCHS_TRAIN, i + 1, len(trainLoader_cross),
                stats['d_loss'], stats['ad'], stats['ag']))
    print("Final PSNR Avg: %f" % trainer.evaluate(testLoader))
    print(datetime.now() - start_time)


if __name__ == "__main__":
    main()
