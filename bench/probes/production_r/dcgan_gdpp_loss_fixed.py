# expect: clean
# source: https://github.com/facebookresearch/pytorch_GAN_zoo/pull/85
"""DCGAN trained with the GAN-zoo BaseGAN machinery and the optional GDPP loss.

Reproduces the structure of pytorch_GAN_zoo: a BaseConfig holder, loss
criterion wrappers (DCGAN / WGANGP), gradient-penalty and GDPP loss
helpers that perform their own backward pass, a BaseGAN class implementing
optimizeParameters (discriminator update, generator update, moving-average
generator), and a DCGAN subclass providing the networks.  Trained for a few
iterations on synthetic 16x16 images.
"""
from copy import deepcopy

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class BaseConfig:
    r"""An empty class used for configuration members"""


def finiteCheck(parameters):
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(filter(lambda p: p.grad is not None, parameters))
    for p in parameters:
        infGrads = torch.isinf(p.grad.data)
        p.grad.data[infGrads] = 0
        nanGrads = torch.isnan(p.grad.data)
        p.grad.data[nanGrads] = 0


class BaseLossWrapper:
    def __init__(self, device):
        self.device = device

    def getCriterion(self, input, status):
        pass


class WGANGP(BaseLossWrapper):
    def __init__(self, device):
        self.generationActivation = None
        self.sizeDecisionLayer = 1
        BaseLossWrapper.__init__(self, device)

    def getCriterion(self, input, status):
        if status:
            return -input[:, 0].sum()
        return input[:, 0].sum()


class DCGAN(BaseLossWrapper):
    def __init__(self, device):
        self.generationActivation = F.tanh
        self.sizeDecisionLayer = 1
        BaseLossWrapper.__init__(self, device)

    def getCriterion(self, input, status):
        size = input.size()[0]
        value = int(status)
        reference = torch.tensor([value], dtype=torch.float).expand(size).to(self.device)
        return F.binary_cross_entropy(torch.sigmoid(input[:, :self.sizeDecisionLayer]).view(-1), reference)


base_loss_criterions = {"WGANGP": WGANGP, "DCGAN": DCGAN}


def WGANGPGradientPenalty(input, fake, discriminator, weight, backward=True):
    r"""Gradient penalty as described in "Improved Training of Wasserstein GANs"."""
    batchSize = input.size(0)
    alpha = torch.rand(batchSize, 1)
    alpha = alpha.expand(batchSize, int(input.nelement() / batchSize)).contiguous().view(input.size())
    alpha = alpha.to(input.device)
    interpolates = alpha * input + ((1 - alpha) * fake)
    interpolates = torch.autograd.Variable(interpolates, requires_grad=True)
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
    r"""Implementation of the GDPP loss. Can be used with any kind of GAN architecture.

    Returns the loss's value. The backward operation in performed within this operator
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
        gdppLoss.backward(retain_graph=True)

    return gdppLoss.item()


class BaseGAN:
    r"""Abstract class: the basic framework for GAN training."""

    def __init__(self, dimLatentVector, dimOutput=3, baseLearningRate=0.001, lossMode="WGANGP",
                 lambdaGP=0., epsilonD=0., GDPP=False, **kwargs):
        if "config" not in vars(self):
            self.config = BaseConfig()
        self.device = torch.device("cpu")
        self.config.noiseVectorDim = dimLatentVector
        self.config.dimOutput = dimOutput
        self.config.learningRate = baseLearningRate
        self.config.attribKeysOrder = None
        self.config.categoryVectorDim = 0
        # GDPP
        self.config.GDPP = GDPP
        self.config.latentVectorDim = self.config.noiseVectorDim + self.config.categoryVectorDim
        # Loss criterion
        self.config.lossCriterion = lossMode
        self.lossCriterion = base_loss_criterions[lossMode](self.device)
        # WGAN-GP
        self.config.lambdaGP = lambdaGP
        # Weight on D's output
        self.config.epsilonD = epsilonD
        self.netD = self.getNetD()
        self.netG = self.getNetG()
        self.optimizerD = self.getOptimizerD()
        self.optimizerG = self.getOptimizerG()
        self.buildAvG()

    def buildAvG(self):
        self.avgG = deepcopy(self.getOriginalG())
        for param in self.avgG.parameters():
            param.requires_grad = False

    def getOriginalG(self):
        return self.netG

    def getOriginalD(self):
        return self.netD

    def buildNoiseData(self, n_samples):
        inputLatent = torch.randn(n_samples, self.config.noiseVectorDim).to(self.device)
        return inputLatent, None

    def classificationPenalty(self, outputD, target, weight, backward=True):
        return 0

    def optimizeParameters(self, input_batch, inputLabels=None):
        allLosses = {}
        self.real_input, self.realLabels = input_batch.to(self.device), None
        n_samples = self.real_input.size()[0]

        # Update the discriminator
        self.optimizerD.zero_grad()
        predRealD = self.netD(self.real_input, False)
        lossD = self.lossCriterion.getCriterion(predRealD, True)
        allLosses["lossD_real"] = lossD.item()

        inputLatent, targetRandCat = self.buildNoiseData(n_samples)
        predFakeG = self.netG(inputLatent).detach()
        predFakeD = self.netD(predFakeG, False)
        lossDFake = self.lossCriterion.getCriterion(predFakeD, False)
        allLosses["lossD_fake"] = lossDFake.item()
        lossD += lossDFake

        if self.config.lambdaGP > 0:
            allLosses["lossD_Grad"] = WGANGPGradientPenalty(self.real_input, predFakeG, self.netD,
                                                            self.config.lambdaGP, backward=True)
        if self.config.epsilonD > 0:
            lossEpsilon = (predRealD[:, 0] ** 2).sum() * self.config.epsilonD
            lossD += lossEpsilon
            allLosses["lossD_Epsilon"] = lossEpsilon.item()

        lossD.backward(retain_graph=True)
        finiteCheck(self.getOriginalD().parameters())
        self.optimizerD.step()

        # Update the generator
        self.optimizerG.zero_grad()
        self.optimizerD.zero_grad()
        inputNoise, targetCatNoise = self.buildNoiseData(n_samples)
        predFakeG = self.netG(inputNoise)
        predFakeD, phiGFake = self.netD(predFakeG, True)
        allLosses["lossG_classif"] = self.classificationPenalty(predFakeD, targetCatNoise, 0.0, backward=True)

        lossGFake = self.lossCriterion.getCriterion(predFakeD, True)
        allLosses["lossG_fake"] = lossGFake.item()
        lossGFake.backward(retain_graph=True)

        if self.config.GDPP:
            _, phiDReal = self.netD.forward(self.real_input, True)
            allLosses["lossG_GDPP"] = GDPPLoss(phiDReal, phiGFake, backward=True)

        finiteCheck(self.getOriginalG().parameters())
        self.optimizerG.step()

        # Update the moving average if relevant
        with torch.no_grad():
            for p, avg_p in zip(self.getOriginalG().parameters(), self.avgG.parameters()):
                avg_p.mul_(0.999).add_(0.001 * p.data)
        return allLosses


class GNet(nn.Module):
    def __init__(self, dimLatentVector, dimG, dimOutput, generationActivation=None):
        super().__init__()
        self.dimG = dimG
        self.fc = nn.Linear(dimLatentVector, dimG * 2 * 4 * 4)
        self.main = nn.Sequential(
            nn.BatchNorm2d(dimG * 2), nn.ReLU(True),
            nn.ConvTranspose2d(dimG * 2, dimG, 4, 2, 1, bias=False), nn.BatchNorm2d(dimG), nn.ReLU(True),
            nn.ConvTranspose2d(dimG, dimOutput, 4, 2, 1, bias=False))
        self.activation = generationActivation

    def forward(self, input):
        x = self.main(self.fc(input).view(-1, self.dimG * 2, 4, 4))
        return self.activation(x) if self.activation is not None else x


class DNet(nn.Module):
    def __init__(self, dimD, sizeDecisionLayer, dimInput=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(dimInput, dimD, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(dimD, dimD * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(dimD * 2),
            nn.LeakyReLU(0.2, inplace=True))
        self.decisionLayer = nn.Linear(dimD * 2 * 4 * 4, sizeDecisionLayer)

    def forward(self, x, getFeature=False):
        feature = self.main(x).view(x.size(0), -1)
        out = self.decisionLayer(feature)
        if getFeature:
            return out, feature
        return out


class DCGANModel(BaseGAN):
    def __init__(self, dimLatentVector=16, dimG=16, dimD=16, depth=3, **kwargs):
        if "config" not in vars(self):
            self.config = BaseConfig()
        self.config.dimG = dimG
        self.config.dimD = dimD
        BaseGAN.__init__(self, dimLatentVector, depth, **kwargs)

    def getNetG(self):
        return GNet(self.config.latentVectorDim, self.config.dimG, self.config.dimOutput,
                    generationActivation=self.lossCriterion.generationActivation)

    def getNetD(self):
        return DNet(self.config.dimD, self.lossCriterion.sizeDecisionLayer, dimInput=self.config.dimOutput)

    def getOptimizerD(self):
        return optim.Adam(filter(lambda p: p.requires_grad, self.netD.parameters()),
                          betas=[0.5, 0.999], lr=self.config.learningRate)

    def getOptimizerG(self):
        return optim.Adam(filter(lambda p: p.requires_grad, self.netG.parameters()),
                          betas=[0.5, 0.999], lr=self.config.learningRate)


def main():
    torch.manual_seed(0)
    training_config = {"baseLearningRate": 2e-4, "lossMode": "DCGAN", "lambdaGP": 0.0,
                       "epsilonD": 0.001, "GDPP": True}
    model = DCGANModel(dimLatentVector=16, dimG=16, dimD=16, depth=3, **training_config)
    data = torch.rand(64, 3, 16, 16) * 2 - 1
    for step, batch in enumerate(data.split(16)):
        losses = model.optimizeParameters(batch)
        print(step, {k: round(float(v), 4) for k, v in losses.items()})


if __name__ == "__main__":
    main()
