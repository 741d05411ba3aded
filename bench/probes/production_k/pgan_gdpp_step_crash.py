# expect: freed_graph
# source: https://github.com/facebookresearch/pytorch_GAN_zoo/issues/83
"""BaseGAN / DCGAN training step with WGAN-GP and the optional GDPP loss.

Layout follows a GAN-zoo style package: loss criterions, gradient penalties
and the GDPP loss are standalone functions that perform their own backward
pass; BaseGAN.optimizeParameters orchestrates one D step and one G step.
"""
from copy import deepcopy

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- utils
class BaseConfig:
    """Plain attribute bag used for configs and temporary training state."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def finiteCheck(parameters):
    parameters = [p for p in parameters if p.grad is not None]
    for p in parameters:
        p.grad.data[torch.isinf(p.grad.data)] = 0
        p.grad.data[torch.isnan(p.grad.data)] = 0


# ---------------------------------------------------------------- losses
class WGANGP:
    """Paper WGANGP loss : linear activation for the generator."""

    def __init__(self, device):
        self.generationActivation = None
        self.sizeDecisionLayer = 1
        self.device = device

    def getCriterion(self, input, status):
        if status:
            return -input[:, 0].sum()
        return input[:, 0].sum()


def WGANGPGradientPenalty(input, fake, discriminator, weight, backward=True):
    batchSize = input.size(0)
    alpha = torch.rand(batchSize, 1)
    alpha = alpha.expand(batchSize, int(input.nelement() / batchSize)).contiguous().view(input.size())
    interpolates = alpha * input + ((1 - alpha) * fake)
    interpolates = interpolates.detach().requires_grad_(True)

    decisionInterpolate = discriminator(interpolates, False)
    decisionInterpolate = decisionInterpolate[:, 0].sum()
    gradients = torch.autograd.grad(outputs=decisionInterpolate, inputs=interpolates,
                                    create_graph=True, retain_graph=True)
    gradients = gradients[0].view(batchSize, -1)
    gradients = (gradients * gradients).sum(dim=1).sqrt()
    gradient_penalty = (((gradients - 1.0) ** 2)).sum() * weight
    if backward:
        gradient_penalty.backward(retain_graph=True)
    return gradient_penalty.item()


def GDPPLoss(phiFake, phiReal, backward=True):
    r"""
    Implementation of the GDPP loss. Can be used with any kind of GAN
    architecture.

    Args:
        phiFake (tensor) : last feature layer of the discriminator on real data
        phiReal (tensor) : last feature layer of the discriminator on fake data
        backward (bool)  : should we perform the backward operation ?

    Returns:
        Loss's value. The backward operation in performed within this operator
    """
    def compute_diversity(phi):
        phi = F.normalize(phi, p=2, dim=1)
        SB = torch.mm(phi, phi.t())
        eigVals, eigVecs = torch.linalg.eigh(SB)
        return eigVals, eigVecs

    def normalize_min_max(eigVals):
        minV, maxV = torch.min(eigVals), torch.max(eigVals)
        return (eigVals - minV) / (maxV - minV)

    fakeEigVals, fakeEigVecs = compute_diversity(phiFake)
    realEigVals, realEigVecs = compute_diversity(phiReal)

    # Scaling factor to make the two losses operating in comparable ranges.
    magnitudeLoss = 0.0001 * F.mse_loss(target=realEigVals, input=fakeEigVals)
    structureLoss = -torch.sum(torch.mul(fakeEigVecs, realEigVecs), 0)
    normalizedRealEigVals = normalize_min_max(realEigVals)
    weightedStructureLoss = torch.sum(torch.mul(normalizedRealEigVals, structureLoss))
    gdppLoss = magnitudeLoss + weightedStructureLoss

    if backward:
        gdppLoss.backward(retain_graph=True)  # raises

    return gdppLoss.item()


# ---------------------------------------------------------------- networks
class DCGANGenerator(nn.Module):
    def __init__(self, dimLatent, dimOutput=3, size=8, ngf=32):
        super().__init__()
        self.dimOutput, self.size = dimOutput, size
        self.main = nn.Sequential(nn.Linear(dimLatent, ngf * 4), nn.ReLU(True),
                                  nn.Linear(ngf * 4, dimOutput * size * size), nn.Tanh())

    def forward(self, x):
        return self.main(x).view(-1, self.dimOutput, self.size, self.size)


class DCGANDiscriminator(nn.Module):
    def __init__(self, dimInput=3, size=8, ndf=32, sizeDecisionLayer=1):
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(dimInput * size * size, ndf * 2),
                                      nn.LeakyReLU(0.2), nn.Linear(ndf * 2, ndf), nn.LeakyReLU(0.2))
        self.decisionLayer = nn.Linear(ndf, sizeDecisionLayer)

    def forward(self, x, getFeature=False):
        feature = self.features(x)
        out = self.decisionLayer(feature)
        if getFeature:
            return out, feature
        return out


# ---------------------------------------------------------------- models
class BaseGAN:
    r"""Abstract class: the basic framework for GAN training."""

    def __init__(self, dimLatentVector, dimOutput=3, baseLearningRate=0.001,
                 lossMode='WGANGP', lambdaGP=0., epsilonD=0., GDPP=False):
        self.config = BaseConfig()
        self.device = torch.device('cpu')
        self.config.noiseVectorDim = dimLatentVector
        self.config.latentVectorDim = dimLatentVector
        self.config.dimOutput = dimOutput
        self.config.learningRate = baseLearningRate
        self.config.GDPP = GDPP
        self.config.lossCriterion = lossMode
        self.lossCriterion = {'WGANGP': WGANGP}[lossMode](self.device)
        self.config.lambdaGP = lambdaGP
        self.config.epsilonD = epsilonD

        self.netD = self.getNetD()
        self.netG = self.getNetG()
        self.buildAvG()
        self.optimizerD = self.getOptimizerD()
        self.optimizerG = self.getOptimizerG()

    def buildAvG(self):
        self.avgG = deepcopy(self.netG)
        for param in self.avgG.parameters():
            param.requires_grad = False

    def getOriginalG(self):
        return self.netG

    def getOriginalD(self):
        return self.netD

    def buildNoiseData(self, n_samples):
        return torch.randn(n_samples, self.config.noiseVectorDim), None

    def optimizeParameters(self, input_batch):
        allLosses = {}
        self.real_input = input_batch.to(self.device)
        n_samples = self.real_input.size()[0]

        # Update the discriminator
        self.optimizerD.zero_grad()

        # #1 Real data
        predRealD = self.netD(self.real_input, False)
        lossD = self.lossCriterion.getCriterion(predRealD, True)
        allLosses["lossD_real"] = lossD.item()

        # #2 Fake data
        inputLatent, _ = self.buildNoiseData(n_samples)
        predFakeG = self.netG(inputLatent).detach()
        predFakeD = self.netD(predFakeG, False)
        lossDFake = self.lossCriterion.getCriterion(predFakeD, False)
        allLosses["lossD_fake"] = lossDFake.item()
        lossD += lossDFake

        # #3 WGANGP gradient loss
        if self.config.lambdaGP > 0:
            allLosses["lossD_Grad"] = WGANGPGradientPenalty(
                self.real_input, predFakeG, self.netD, self.config.lambdaGP, backward=True)

        # #4 Epsilon loss
        if self.config.epsilonD > 0:
            lossEpsilon = (predRealD[:, 0] ** 2).sum() * self.config.epsilonD
            lossD += lossEpsilon
            allLosses["lossD_Epsilon"] = lossEpsilon.item()

        lossD.backward(retain_graph=True)
        finiteCheck(self.getOriginalD().parameters())
        self.optimizerD.step()
        allLosses["lossD"] = sum(v for k, v in allLosses.items() if k.startswith("lossD"))

        # Update the generator
        self.optimizerG.zero_grad()
        self.optimizerD.zero_grad()

        # #1 Image generation
        inputNoise, _ = self.buildNoiseData(n_samples)
        predFakeG = self.netG(inputNoise)

        # #2 Status evaluation
        predFakeD, phiGFake = self.netD(predFakeG, True)

        # #3 GAN criterion
        lossGFake = self.lossCriterion.getCriterion(predFakeD, True)
        allLosses["lossG_fake"] = lossGFake.item()
        lossGFake.backward()

        if self.config.GDPP:
            _, phiDReal = self.netD.forward(self.real_input, True)
            allLosses["lossG_GDPP"] = GDPPLoss(phiDReal, phiGFake, backward=True)

        finiteCheck(self.getOriginalG().parameters())
        self.optimizerG.step()
        allLosses["lossG"] = sum(v for k, v in allLosses.items() if k.startswith("lossG"))

        # Update the moving average if relevant
        for p, avg_p in zip(self.getOriginalG().parameters(), self.avgG.parameters()):
            avg_p.mul_(0.999).add_(p.data, alpha=0.001)

        return allLosses

    def getNetG(self):
        raise NotImplementedError

    def getNetD(self):
        raise NotImplementedError

    def getOptimizerD(self):
        raise NotImplementedError

    def getOptimizerG(self):
        raise NotImplementedError


class DCGAN(BaseGAN):
    def __init__(self, dimLatentVector=16, dimG=32, dimD=32, **kwargs):
        self.dimG, self.dimD = dimG, dimD
        super().__init__(dimLatentVector, **kwargs)

    def getNetG(self):
        return DCGANGenerator(self.config.latentVectorDim, self.config.dimOutput, ngf=self.dimG)

    def getNetD(self):
        return DCGANDiscriminator(self.config.dimOutput, ndf=self.dimD,
                                  sizeDecisionLayer=self.lossCriterion.sizeDecisionLayer)

    def getOptimizerD(self):
        return torch.optim.Adam(filter(lambda p: p.requires_grad, self.netD.parameters()),
                                betas=[0.5, 0.999], lr=self.config.learningRate)

    def getOptimizerG(self):
        return torch.optim.Adam(filter(lambda p: p.requires_grad, self.netG.parameters()),
                                betas=[0.5, 0.999], lr=self.config.learningRate)


def make_dataset(n=256, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = torch.linspace(-1, 1, size)
    base = torch.stack(torch.meshgrid(xs, xs, indexing="ij")).sum(0)
    phase = torch.rand(n, 3, 1, 1, generator=g) * 3.14
    return torch.tanh(torch.sin(base[None, None] * 2 + phase) + 0.1 * torch.randn(n, 3, size, size, generator=g))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DCGAN(dimLatentVector=16, lambdaGP=10., epsilonD=0.001, GDPP=True)
    data = make_dataset()
    for step in range(20):
        batch = data[(step * 16) % 256:(step * 16) % 256 + 16]
        losses = model.optimizeParameters(batch)
    print({k: round(v, 4) for k, v in losses.items()})
