# expect: clean
# source: https://github.com/samet-akcay/skip-ganomaly/issues/16
"""Skip-GANomaly: adversarially trained encoder-decoder for anomaly detection.

The generator is a small U-Net with skip connections that reconstructs normal
images; the discriminator returns both a real/fake prediction and an
intermediate feature map.  Training alternates update_netg / update_netd as in
the original lib/models/skipganomaly.py; at test time the anomaly score mixes
the reconstruction error and the latent (feature) error and is evaluated with
ROC-AUC on a held-out set that contains synthetic anomalies.
"""
import argparse
import time
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.optim as optim


def get_options(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--batchsize", type=int, default=8)
    p.add_argument("--isize", type=int, default=16)
    p.add_argument("--nc", type=int, default=3)
    p.add_argument("--ngf", type=int, default=16)
    p.add_argument("--ndf", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--w_adv", type=float, default=1.0)
    p.add_argument("--w_con", type=float, default=50.0)
    p.add_argument("--w_lat", type=float, default=1.0)
    p.add_argument("--niter", type=int, default=2)
    p.add_argument("--lr_policy", default="lambda")
    p.add_argument("--isTrain", action="store_false")
    return p.parse_args(argv)


def l2_loss(input, target, size_average=True):
    return torch.mean(torch.pow((input - target), 2)) if size_average else torch.pow((input - target), 2)


def weights_init(mod):
    classname = mod.__class__.__name__
    if classname.find("Conv") != -1:
        mod.weight.data.normal_(0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        mod.weight.data.normal_(1.0, 0.02)
        mod.bias.data.fill_(0)


def get_scheduler(optimizer, opt):
    if opt.lr_policy == "lambda":
        return optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda ep: 1.0 - max(0, ep - opt.niter) / float(opt.niter + 1))
    return optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


class UnetGenerator(nn.Module):
    def __init__(self, nc, ngf):
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(nc, ngf, 4, 2, 1), nn.LeakyReLU(0.2))
        self.down2 = nn.Sequential(nn.Conv2d(ngf, ngf * 2, 4, 2, 1), nn.BatchNorm2d(ngf * 2), nn.LeakyReLU(0.2))
        self.up2 = nn.Sequential(nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1), nn.BatchNorm2d(ngf), nn.ReLU())
        self.up1 = nn.Sequential(nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1), nn.Tanh())

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(d1)
        u2 = self.up2(d2)
        return self.up1(torch.cat([u2, d1], dim=1))


class BasicDiscriminator(nn.Module):
    def __init__(self, nc, ndf):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2))
        self.classifier = nn.Sequential(nn.Conv2d(ndf * 2, 1, 4, 1, 0), nn.Sigmoid())

    def forward(self, x):
        features = self.features(x)
        return self.classifier(features).view(-1), features


def roc_auc(labels, scores):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float)
    pos = labels == 1
    n_pos, n_neg = pos.sum().item(), (~pos).sum().item()
    return ((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


class BaseModel:
    def __init__(self, opt, data):
        self.opt = opt
        self.data = data
        self.device = torch.device("cpu")

    def set_input(self, batch):
        with torch.no_grad():
            self.input.resize_(batch[0].size()).copy_(batch[0])
            self.gt.resize_(batch[1].size()).copy_(batch[1])
            self.noise.resize_(batch[0].size()).normal_(0, 0.05)

    def get_errors(self):
        return OrderedDict([("err_d", self.err_d.item()), ("err_g", self.err_g.item()),
                            ("err_g_adv", self.err_g_adv.item()), ("err_g_con", self.err_g_con.item()),
                            ("err_g_lat", self.err_g_lat.item())])

    def update_learning_rate(self):
        for scheduler in self.schedulers:
            scheduler.step()


class Skipganomaly(BaseModel):
    @property
    def name(self):
        return "skip-ganomaly"

    def __init__(self, opt, data):
        super().__init__(opt, data)
        self.netg = UnetGenerator(opt.nc, opt.ngf)
        self.netd = BasicDiscriminator(opt.nc, opt.ndf)
        self.netg.apply(weights_init)
        self.netd.apply(weights_init)
        self.l_adv = nn.BCELoss()
        self.l_con = nn.L1Loss()
        self.l_lat = l2_loss
        shape = (opt.batchsize, opt.nc, opt.isize, opt.isize)
        self.input = torch.empty(size=shape, dtype=torch.float32)
        self.noise = torch.empty(size=shape, dtype=torch.float32)
        self.gt = torch.empty(size=(opt.batchsize,), dtype=torch.long)
        self.real_label = torch.ones(size=(opt.batchsize,), dtype=torch.float32)
        self.fake_label = torch.zeros(size=(opt.batchsize,), dtype=torch.float32)
        if opt.isTrain:
            self.netg.train()
            self.netd.train()
            self.optimizer_d = optim.Adam(self.netd.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizer_g = optim.Adam(self.netg.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizers = [self.optimizer_d, self.optimizer_g]
            self.schedulers = [get_scheduler(o, opt) for o in self.optimizers]

    def forward(self):
        self.forward_g()
        self.forward_d()

    def forward_g(self):
        self.fake = self.netg(self.input + self.noise)

    def forward_d(self):
        self.pred_real, self.feat_real = self.netd(self.input)
        self.pred_fake, self.feat_fake = self.netd(self.fake)

    def backward_g(self):
        self.err_g_adv = self.opt.w_adv * self.l_adv(self.pred_fake, self.real_label)
        self.err_g_con = self.opt.w_con * self.l_con(self.fake, self.input)
        self.err_g_lat = self.opt.w_lat * self.l_lat(self.feat_fake, self.feat_real)
        self.err_g = self.err_g_adv + self.err_g_con + self.err_g_lat
        self.err_g.backward(retain_graph=True)

    def backward_d(self):
        pred_fake, _ = self.netd(self.fake.detach())
        self.err_d_fake = self.l_adv(pred_fake, self.fake_label)
        self.err_d_real = self.l_adv(self.pred_real, self.real_label)
        self.err_d = self.err_d_real + self.err_d_fake
        self.err_d.backward(retain_graph=True)

    def reinit_d(self):
        self.netd.apply(weights_init)
        print("   Reloading net d")

    def update_netg(self):
        self.optimizer_g.zero_grad()
        self.backward_g()
        self.optimizer_g.step()

    def update_netd(self):
        self.optimizer_d.zero_grad()
        self.backward_d()
        self.optimizer_d.step()
        if self.err_d < 1e-5:
            self.reinit_d()

    def optimize_params(self):
        self.forward()
        self.update_netg()
        self.update_netd()

    def train_one_epoch(self, epoch):
        self.netg.train()
        for batch in self.data["train"]:
            self.set_input(batch)
            self.optimize_params()
        self.update_learning_rate()
        print(">> epoch %d" % epoch, {k: round(v, 4) for k, v in self.get_errors().items()})

    def test(self):
        with torch.no_grad():
            self.netg.eval()
            self.netd.eval()
            scores, labels = [], []
            for batch in self.data["valid"]:
                self.set_input(batch)
                fake = self.netg(self.input)
                _, feat_real = self.netd(self.input)
                _, feat_fake = self.netd(fake)
                rec = (self.input - fake).pow(2).flatten(1).mean(1)
                lat = (feat_real - feat_fake).pow(2).flatten(1).mean(1)
                scores.append(0.9 * rec + 0.1 * lat)
                labels.append(self.gt.clone())
            scores = torch.cat(scores)
            scores = (scores - scores.min()) / (scores.max() - scores.min())
            return OrderedDict([("AUC", roc_auc(torch.cat(labels), scores))])

    def train(self):
        best_auc = 0.0
        for epoch in range(self.opt.niter):
            t0 = time.time()
            self.train_one_epoch(epoch)
            res = self.test()
            best_auc = max(best_auc, res["AUC"])
            print("   epoch %d  AUC %.3f  best %.3f  (%.2fs)" % (epoch, res["AUC"], best_auc, time.time() - t0))
        return best_auc


def make_data(opt, seed=0):
    g = torch.Generator().manual_seed(seed)
    def normal(n):
        base = torch.linspace(-0.5, 0.5, opt.isize).view(1, 1, 1, -1).expand(n, opt.nc, opt.isize, opt.isize)
        return base + 0.05 * torch.randn(n, opt.nc, opt.isize, opt.isize, generator=g)
    train = [(normal(opt.batchsize), torch.zeros(opt.batchsize, dtype=torch.long)) for _ in range(3)]
    valid = []
    for _ in range(2):
        x = normal(opt.batchsize)
        y = torch.zeros(opt.batchsize, dtype=torch.long)
        x[: opt.batchsize // 2] += torch.rand(opt.batchsize // 2, opt.nc, opt.isize, opt.isize, generator=g)
        y[: opt.batchsize // 2] = 1
        valid.append((x, y))
    return {"train": train, "valid": valid}


def main():
    opt = get_options([])
    torch.manual_seed(0)
    model = Skipganomaly(opt, make_data(opt))
    print("best AUC %.3f" % model.train())


if __name__ == "__main__":
    main()
