# expect: clean
# source: https://github.com/samet-akcay/skip-ganomaly/issues/18
"""Skip-GANomaly: adversarially trained U-Net encoder-decoder for anomaly detection.

Project layout kept from the original repository: an options object, a networks
module (U-Net generator with skip connections, DCGAN discriminator that also returns
its feature map, weight init, LR schedulers), a BaseModel with set_input / train /
test / evaluation, and the Skipganomaly model with forward_g / forward_d /
backward_g / backward_d / update_netg / update_netd / optimize_params.
Runs on a small synthetic "normal vs. abnormal" image set on CPU.
"""
import argparse
import time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim import lr_scheduler


# ----------------------------------------------------------------------------- options
def parse_opt():
    p = argparse.ArgumentParser()
    p.add_argument('--batchsize', type=int, default=8)
    p.add_argument('--isize', type=int, default=16)
    p.add_argument('--nc', type=int, default=3)
    p.add_argument('--ngf', type=int, default=8)
    p.add_argument('--ndf', type=int, default=8)
    p.add_argument('--nz', type=int, default=16)
    p.add_argument('--niter', type=int, default=2)
    p.add_argument('--lr', type=float, default=2e-4)
    p.add_argument('--beta1', type=float, default=0.5)
    p.add_argument('--w_adv', type=float, default=1.0)
    p.add_argument('--w_con', type=float, default=50.0)
    p.add_argument('--w_lat', type=float, default=1.0)
    p.add_argument('--lr_policy', type=str, default='lambda')
    p.add_argument('--iter', type=int, default=0)
    opt = p.parse_args([])
    opt.isTrain = True
    return opt


# ----------------------------------------------------------------------------- networks
def weights_init(mod):
    classname = mod.__class__.__name__
    if classname.find('Conv') != -1:
        mod.weight.data.normal_(0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        mod.weight.data.normal_(1.0, 0.02)
        mod.bias.data.fill_(0)


def get_scheduler(optimizer, opt):
    if opt.lr_policy == 'lambda':
        def lambda_rule(epoch):
            return 1.0 - max(0, epoch + 1 + opt.iter - opt.niter) / float(opt.niter + 1)
        return lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda_rule)
    return lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)


class UnetSkipBlock(nn.Module):
    def __init__(self, outer_nc, inner_nc, submodule=None, outermost=False, innermost=False):
        super().__init__()
        self.outermost = outermost
        down = [nn.LeakyReLU(0.2), nn.Conv2d(outer_nc, inner_nc, 4, 2, 1, bias=False)]
        if outermost:
            down = down[1:]
        up_in = inner_nc if innermost else inner_nc * 2
        up = [nn.ReLU(), nn.ConvTranspose2d(up_in, outer_nc, 4, 2, 1, bias=False)]
        if outermost:
            up.append(nn.Tanh())
        else:
            up.append(nn.BatchNorm2d(outer_nc))
        if not outermost and not innermost:
            down.append(nn.BatchNorm2d(inner_nc))
        model = down + ([submodule] if submodule is not None else []) + up
        self.model = nn.Sequential(*model)

    def forward(self, x):
        if self.outermost:
            return self.model(x)
        return torch.cat([x, self.model(x)], 1)


def define_G(opt):
    block = UnetSkipBlock(opt.ngf * 4, opt.ngf * 4, innermost=True)
    block = UnetSkipBlock(opt.ngf * 2, opt.ngf * 4, submodule=block)
    block = UnetSkipBlock(opt.ngf, opt.ngf * 2, submodule=block)
    net = UnetSkipBlock(opt.nc, opt.ngf, submodule=block, outermost=True)
    net.apply(weights_init)
    return net


class BasicDiscriminator(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(opt.nc, opt.ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
            nn.Conv2d(opt.ndf, opt.ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(opt.ndf * 2), nn.LeakyReLU(0.2))
        self.classifier = nn.Sequential(nn.Conv2d(opt.ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        features = self.features(x)
        classifier = self.classifier(features).view(-1, 1).squeeze(1)
        return classifier, features


def define_D(opt):
    net = BasicDiscriminator(opt)
    net.apply(weights_init)
    return net


def l2_loss(input, target, size_average=True):
    return torch.mean(torch.pow((input - target), 2)) if size_average else torch.pow((input - target), 2)


def roc(labels, scores):
    labels, scores = np.asarray(labels), np.asarray(scores)
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return 0.5
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


# ----------------------------------------------------------------------------- data
def make_data(opt, n_train=32, n_test=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    train = [(torch.randn(opt.batchsize, opt.nc, opt.isize, opt.isize, generator=g).tanh(),
              torch.zeros(opt.batchsize, dtype=torch.long)) for _ in range(n_train // opt.batchsize)]
    test = []
    for _ in range(n_test // opt.batchsize):
        x = torch.randn(opt.batchsize, opt.nc, opt.isize, opt.isize, generator=g).tanh()
        y = (torch.rand(opt.batchsize, generator=g) > 0.5).long()
        x[y == 1] += 0.5
        test.append((x, y))
    return OrderedDict(train=train, valid=test)


# ----------------------------------------------------------------------------- models
class BaseModel:
    def __init__(self, opt, data):
        self.opt, self.data = opt, data
        self.device = torch.device('cpu')

    def set_input(self, input, noise=False):
        with torch.no_grad():
            self.input.resize_(input[0].size()).copy_(input[0])
            self.gt.resize_(input[1].size()).copy_(input[1])
            if noise:
                self.noise.data.copy_(torch.randn(self.noise.size()))

    def get_errors(self):
        return OrderedDict([('err_d', self.err_d.item()), ('err_g', self.err_g.item()),
                            ('err_g_adv', self.err_g_adv.item()), ('err_g_con', self.err_g_con.item()),
                            ('err_g_lat', self.err_g_lat.item())])

    def reinit_d(self):
        self.netd.apply(weights_init)
        print('   Reloading net d')

    def update_learning_rate(self):
        for scheduler in self.schedulers:
            scheduler.step()

    def train_one_epoch(self):
        self.netg.train()
        epoch_iter = 0
        for data in self.data['train']:
            self.total_steps += self.opt.batchsize
            epoch_iter += self.opt.batchsize
            self.set_input(data)
            self.optimize_params()
        errors = self.get_errors()
        print('>> epoch %d  ' % self.epoch + '  '.join('%s %.3f' % kv for kv in errors.items()))

    def train(self):
        self.total_steps = 0
        best_auc = 0
        for self.epoch in range(self.opt.iter, self.opt.niter):
            self.train_one_epoch()
            res = self.test()
            if res['AUC'] > best_auc:
                best_auc = res['AUC']
            self.update_learning_rate()
        print('>> Training model %s.[Done]  best AUC %.3f' % (self.name, best_auc))


class Skipganomaly(BaseModel):
    @property
    def name(self):
        return 'skip-ganomaly'

    def __init__(self, opt, data=None):
        super().__init__(opt, data)
        self.epoch, self.times, self.total_steps = 0, [], 0
        self.netg = define_G(self.opt)
        self.netd = define_D(self.opt)
        self.l_adv = nn.BCELoss()
        self.l_con = nn.L1Loss()
        self.l_lat = l2_loss
        self.input = torch.empty(size=(opt.batchsize, 3, opt.isize, opt.isize), dtype=torch.float32)
        self.noise = torch.empty(size=(opt.batchsize, 3, opt.isize, opt.isize), dtype=torch.float32).zero_()
        self.gt = torch.empty(size=(opt.batchsize,), dtype=torch.long)
        self.real_label = torch.ones(size=(opt.batchsize,), dtype=torch.float32)
        self.fake_label = torch.zeros(size=(opt.batchsize,), dtype=torch.float32)
        if self.opt.isTrain:
            self.netg.train()
            self.netd.train()
            self.optimizer_d = optim.Adam(self.netd.parameters(), lr=self.opt.lr, betas=(self.opt.beta1, 0.999))
            self.optimizer_g = optim.Adam(self.netg.parameters(), lr=self.opt.lr, betas=(self.opt.beta1, 0.999))
            self.optimizers = [self.optimizer_d, self.optimizer_g]
            self.schedulers = [get_scheduler(optimizer, opt) for optimizer in self.optimizers]

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
        # Fake
        pred_fake, _ = self.netd(self.fake.detach())
        self.err_d_fake = self.l_adv(pred_fake, self.fake_label)
        # Real
        self.err_d_real = self.l_adv(self.pred_real, self.real_label)
        # Combine losses.
        self.err_d = self.err_d_real + self.err_d_fake
        self.err_d.backward(retain_graph=True)

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

    def test(self):
        with torch.no_grad():
            self.netg.eval()
            n = sum(len(b[1]) for b in self.data['valid'])
            self.an_scores = torch.zeros(size=(n,), dtype=torch.float32)
            self.gt_labels = torch.zeros(size=(n,), dtype=torch.long)
            self.times = []
            for i, data in enumerate(self.data['valid']):
                time_i = time.time()
                self.set_input(data)
                self.fake = self.netg(self.input)
                _, self.feat_real = self.netd(self.input)
                _, self.feat_fake = self.netd(self.fake)
                si, sz = self.input.size(), self.feat_real.size()
                rec = (self.input - self.fake).view(si[0], si[1] * si[2] * si[3])
                lat = (self.feat_real - self.feat_fake).view(sz[0], sz[1] * sz[2] * sz[3])
                error = 0.9 * torch.mean(torch.pow(rec, 2), dim=1) + 0.1 * torch.mean(torch.pow(lat, 2), dim=1)
                self.times.append(time.time() - time_i)
                bs = error.size(0)
                self.an_scores[i * self.opt.batchsize: i * self.opt.batchsize + bs] = error.reshape(bs)
                self.gt_labels[i * self.opt.batchsize: i * self.opt.batchsize + bs] = self.gt.reshape(bs)
            self.an_scores = (self.an_scores - torch.min(self.an_scores)) / \
                             (torch.max(self.an_scores) - torch.min(self.an_scores))
            auc = roc(self.gt_labels.numpy(), self.an_scores.numpy())
            self.netg.train()
            return OrderedDict([('Avg Run Time (ms/batch)', 1000 * float(np.mean(self.times))), ('AUC', auc)])


def main():
    torch.manual_seed(0)
    opt = parse_opt()
    data = make_data(opt)
    model = Skipganomaly(opt, data)
    model.train()


if __name__ == '__main__':
    main()
