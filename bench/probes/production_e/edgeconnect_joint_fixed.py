# expect: clean
# source: https://github.com/knazeri/edge-connect/issues/40
"""Two-stage image inpainting (EdgeConnect) trained in joint mode (MODEL=4).

Stage 1 (EdgeModel) hallucinates the edge map inside the hole from the masked
grayscale image and the masked edges; stage 2 (InpaintingModel) fills the hole
of the RGB image conditioned on the completed edge map.  Each stage has its own
generator, discriminator and optimizers; in joint mode both are trained on
every batch.
"""
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "MODEL": 4,
    "SEED": 10,
    "BATCH_SIZE": 4,
    "INPUT_SIZE": 32,
    "MAX_ITERS": 4,
    "LOG_INTERVAL": 1,
    "edge": {"LR": 1e-4, "D2G_LR": 0.1, "BETA1": 0.0, "BETA2": 0.9, "FM_LOSS_WEIGHT": 10.0},
    "inpaint": {"LR": 1e-4, "D2G_LR": 0.1, "BETA1": 0.0, "BETA2": 0.9,
                "L1_LOSS_WEIGHT": 1.0, "INPAINT_ADV_LOSS_WEIGHT": 0.1},
    "GAN_LOSS": "nsgan",
}


class AdversarialLoss(nn.Module):
    def __init__(self, type="nsgan", target_real_label=1.0, target_fake_label=0.0):
        super().__init__()
        self.type = type
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.criterion = nn.BCELoss() if type == "nsgan" else nn.MSELoss()

    def __call__(self, outputs, is_real, is_disc=None):
        labels = (self.real_label if is_real else self.fake_label).expand_as(outputs)
        return self.criterion(outputs, labels)


class Discriminator(nn.Module):
    def __init__(self, in_channels, use_sigmoid=True):
        super().__init__()
        self.use_sigmoid = use_sigmoid
        self.conv1 = nn.Sequential(nn.Conv2d(in_channels, 16, 4, 2, 1), nn.LeakyReLU(0.2))
        self.conv2 = nn.Sequential(nn.Conv2d(16, 32, 4, 2, 1), nn.LeakyReLU(0.2))
        self.conv3 = nn.Sequential(nn.Conv2d(32, 1, 3, 1, 1))

    def forward(self, x):
        conv1 = self.conv1(x)
        conv2 = self.conv2(conv1)
        conv3 = self.conv3(conv2)
        outputs = torch.sigmoid(conv3) if self.use_sigmoid else conv3
        return outputs, [conv1, conv2, conv3]


class Generator(nn.Module):
    def __init__(self, in_channels, out_channels, final="tanh"):
        super().__init__()
        self.final = final
        self.encoder = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, 1, 1), nn.ReLU(),
            nn.Conv2d(16, 32, 4, 2, 1), nn.InstanceNorm2d(32), nn.ReLU())
        self.middle = nn.Sequential(nn.Conv2d(32, 32, 3, 1, 2, dilation=2), nn.InstanceNorm2d(32), nn.ReLU())
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.InstanceNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, out_channels, 3, 1, 1))

    def forward(self, x):
        x = self.decoder(self.middle(self.encoder(x)))
        return torch.sigmoid(x) if self.final == "sigmoid" else (torch.tanh(x) + 1) / 2


class BaseModel(nn.Module):
    def __init__(self, name, config):
        super().__init__()
        self.name = name
        self.config = config
        self.iteration = 0


class EdgeModel(BaseModel):
    def __init__(self, config):
        super().__init__("EdgeModel", config)
        c = config["edge"]
        self.generator = Generator(3, 1, final="sigmoid")
        self.discriminator = Discriminator(2, use_sigmoid=config["GAN_LOSS"] != "hinge")
        self.l1_loss = nn.L1Loss()
        self.adversarial_loss = AdversarialLoss(type=config["GAN_LOSS"])
        self.fm_weight = c["FM_LOSS_WEIGHT"]
        self.gen_optimizer = torch.optim.Adam(self.generator.parameters(), lr=c["LR"], betas=(c["BETA1"], c["BETA2"]))
        self.dis_optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=c["LR"] * c["D2G_LR"],
                                              betas=(c["BETA1"], c["BETA2"]))

    def forward(self, images, edges, masks):
        edges_masked = edges * (1 - masks)
        images_masked = images * (1 - masks) + masks
        inputs = torch.cat((images_masked, edges_masked, masks), dim=1)
        return self.generator(inputs)

    def process(self, images, edges, masks):
        self.iteration += 1
        self.gen_optimizer.zero_grad()
        self.dis_optimizer.zero_grad()
        outputs = self(images, edges, masks)
        dis_real, dis_real_feat = self.discriminator(torch.cat((images, edges), dim=1))
        dis_fake, _ = self.discriminator(torch.cat((images, outputs.detach()), dim=1))
        dis_loss = (self.adversarial_loss(dis_real, True, True) + self.adversarial_loss(dis_fake, False, True)) / 2
        gen_fake, gen_fake_feat = self.discriminator(torch.cat((images, outputs), dim=1))
        gen_loss = self.adversarial_loss(gen_fake, True, False)
        gen_fm_loss = sum(self.l1_loss(gf, rf.detach()) for gf, rf in zip(gen_fake_feat, dis_real_feat))
        gen_loss = gen_loss + gen_fm_loss * self.fm_weight
        logs = [("l_d1", dis_loss.item()), ("l_g1", gen_loss.item()), ("l_fm", gen_fm_loss.item())]
        return outputs, gen_loss, dis_loss, logs

    def backward(self, gen_loss=None, dis_loss=None):
        if gen_loss is not None:
            gen_loss.backward()
        self.gen_optimizer.step()
        self.dis_optimizer.zero_grad()
        if dis_loss is not None:
            dis_loss.backward()
        self.dis_optimizer.step()


class InpaintingModel(BaseModel):
    def __init__(self, config):
        super().__init__("InpaintingModel", config)
        c = config["inpaint"]
        self.generator = Generator(4, 3, final="tanh")
        self.discriminator = Discriminator(3, use_sigmoid=config["GAN_LOSS"] != "hinge")
        self.l1_loss = nn.L1Loss()
        self.adversarial_loss = AdversarialLoss(type=config["GAN_LOSS"])
        self.l1_weight = c["L1_LOSS_WEIGHT"]
        self.adv_weight = c["INPAINT_ADV_LOSS_WEIGHT"]
        self.gen_optimizer = torch.optim.Adam(self.generator.parameters(), lr=c["LR"], betas=(c["BETA1"], c["BETA2"]))
        self.dis_optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=c["LR"] * c["D2G_LR"],
                                              betas=(c["BETA1"], c["BETA2"]))

    def forward(self, images, edges, masks):
        images_masked = images * (1 - masks).float() + masks
        return self.generator(torch.cat((images_masked, edges), dim=1))

    def process(self, images, edges, masks):
        self.iteration += 1
        self.gen_optimizer.zero_grad()
        self.dis_optimizer.zero_grad()
        outputs = self(images, edges, masks)
        dis_real, _ = self.discriminator(images)
        dis_fake, _ = self.discriminator(outputs.detach())
        dis_loss = (self.adversarial_loss(dis_real, True, True) + self.adversarial_loss(dis_fake, False, True)) / 2
        gen_fake, _ = self.discriminator(outputs)
        gen_gan_loss = self.adversarial_loss(gen_fake, True, False) * self.adv_weight
        gen_l1_loss = self.l1_loss(outputs, images) * self.l1_weight / torch.mean(masks)
        gen_loss = gen_gan_loss + gen_l1_loss
        logs = [("l_d2", dis_loss.item()), ("l_g2", gen_gan_loss.item()), ("l_l1", gen_l1_loss.item())]
        return outputs, gen_loss, dis_loss, logs

    def backward(self, gen_loss=None, dis_loss=None):
        gen_loss.backward()
        self.gen_optimizer.step()
        self.dis_optimizer.zero_grad()
        dis_loss.backward()
        self.dis_optimizer.step()


def synthetic_batch(config, g):
    b, s = config["BATCH_SIZE"], config["INPUT_SIZE"]
    coarse = torch.rand(b, 3, s // 4, s // 4, generator=g)
    images = F.interpolate(coarse, size=s, mode="bilinear", align_corners=False)
    gray = images.mean(dim=1, keepdim=True)
    gx = F.pad(gray[..., :, 1:] - gray[..., :, :-1], (0, 1, 0, 0)).abs()
    gy = F.pad(gray[..., 1:, :] - gray[..., :-1, :], (0, 0, 0, 1)).abs()
    edges = ((gx + gy) > 0.04).float()
    masks = torch.zeros(b, 1, s, s)
    for i in range(b):
        y, x = torch.randint(0, s // 2, (2,), generator=g).tolist()
        masks[i, :, y:y + s // 2, x:x + s // 2] = 1.0
    return images, gray, edges, masks


class EdgeConnect:
    def __init__(self, config):
        self.config = config
        self.edge_model = EdgeModel(config)
        self.inpaint_model = InpaintingModel(config)

    def train(self):
        g = torch.Generator().manual_seed(self.config["SEED"])
        for it in range(1, self.config["MAX_ITERS"] + 1):
            self.edge_model.train()
            self.inpaint_model.train()
            images, images_gray, edges, masks = synthetic_batch(self.config, g)
            e_outputs, e_gen_loss, e_dis_loss, e_logs = self.edge_model.process(images_gray, edges, masks)
            e_outputs = e_outputs * masks + edges * (1 - masks)
            i_outputs, i_gen_loss, i_dis_loss, i_logs = self.inpaint_model.process(images, e_outputs.detach(), masks)
            outputs_merged = (i_outputs * masks) + (images * (1 - masks))
            mae = (torch.sum(torch.abs(images - outputs_merged)) / torch.sum(images)).item()
            self.inpaint_model.backward(i_gen_loss, i_dis_loss)
            self.edge_model.backward(e_gen_loss, e_dis_loss)
            if it % self.config["LOG_INTERVAL"] == 0:
                logs = [("iter", it), ("mae", round(mae, 4))] + e_logs + i_logs
                print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in logs))


def main():
    config = CONFIG
    os.environ.setdefault("PYTHONHASHSEED", str(config["SEED"]))
    random.seed(config["SEED"])
    torch.manual_seed(config["SEED"])
    model = EdgeConnect(config)
    model.train()


if __name__ == "__main__":
    main()
