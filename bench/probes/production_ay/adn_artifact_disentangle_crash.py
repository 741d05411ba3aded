# expect: inplace_version
# source: https://github.com/liaohaofu/adn/issues/21
"""ADN (Artifact Disentanglement Network) for unsupervised CT metal artifact reduction.

Option dicts (as loaded from YAML), a `BaseTrain` that gives each sub-network its own Adam +
StepLR and monkey-patches `_clear` / `_update` / `_criterion` onto it, GAN losses attached
to the discriminators by `add_gan_loss`, `ADNTrain.optimize`, a PSNR evaluation and a
training driver. CPU, synthetic CT slices with streak artifacts.
"""
import types
from collections import OrderedDict, defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

# ----------------------------------------------------------------------------- utils
def get_device(model):
    return next(model.parameters()).device


def to_npy(t):
    return t.detach().cpu().numpy()


def backprop_on(model):
    for p in model.parameters(): p.requires_grad = True


def backprop_off(model):
    for p in model.parameters(): p.requires_grad = False

# ----------------------------------------------------------------------------- networks
def conv_block(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.InstanceNorm2d(cout), nn.ReLU())


class ADN(nn.Module):
    def __init__(self, in_ch=1, base_ch=8):
        super(ADN, self).__init__()
        self.encoder_low = nn.Sequential(conv_block(in_ch, base_ch), conv_block(base_ch, base_ch * 2, 2))
        self.encoder_art = nn.Sequential(conv_block(in_ch, base_ch), conv_block(base_ch, base_ch * 2, 2))
        self.encoder_high = nn.Sequential(conv_block(in_ch, base_ch), conv_block(base_ch, base_ch * 2, 2))
        self.decoder = nn.Sequential(nn.Upsample(scale_factor=2), conv_block(base_ch * 2, base_ch),
                                     nn.Conv2d(base_ch, in_ch, 3, 1, 1), nn.Tanh())
        self.decoder_art = nn.Sequential(nn.Upsample(scale_factor=2), conv_block(base_ch * 4, base_ch),
                                         nn.Conv2d(base_ch, in_ch, 3, 1, 1), nn.Tanh())

    def forward1(self, x_low):
        code, art = self.encoder_low(x_low), self.encoder_art(x_low)
        return self.decoder_art(torch.cat([code, art], 1)), self.decoder(code)

    def forward2(self, x_low, x_high):
        art, code = self.encoder_art(x_low), self.encoder_high(x_high)
        return self.decoder_art(torch.cat([code, art], 1)), self.decoder(code)

    def forward_lh(self, x_low): return self.decoder(self.encoder_low(x_low))

    def forward_hl(self, x_low, x_high):
        art, code = self.encoder_art(x_low), self.encoder_high(x_high)
        return self.decoder_art(torch.cat([code, art], 1))


class NLayerDiscriminator(nn.Sequential):
    def __init__(self, input_nc=1, ndf=8, n_layers=2):
        layers = [nn.Conv2d(input_nc, ndf, 4, 2, 1), nn.LeakyReLU(0.2)]
        for i in range(1, n_layers):
            layers += [nn.Conv2d(ndf * i, ndf * (i + 1), 4, 2, 1), nn.LeakyReLU(0.2)]
        super(NLayerDiscriminator, self).__init__(*layers, nn.Conv2d(ndf * n_layers, 1, 3, 1, 1))


class GANLoss(nn.Module):
    def __init__(self, gan_mode, target_real_label=1.0, target_fake_label=0.0):
        super(GANLoss, self).__init__()
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.gan_mode = gan_mode
        self.loss = nn.MSELoss() if gan_mode == "lsgan" else nn.BCEWithLogitsLoss()

    def __call__(self, prediction, target_is_real):
        target = self.real_label if target_is_real else self.fake_label
        return self.loss(prediction, target.expand_as(prediction))


def add_gan_loss(model, gan_type="lsgan"):
    """ Add GAN loss to a discriminator (model) """
    if hasattr(model, "get_d_loss") and hasattr(model, "get_g_loss"):
        return model
    gan_loss = GANLoss(gan_type)

    def get_d_loss(self, fake, real):
        pred_real = self(real)
        pred_fake = self(fake.detach())
        return (gan_loss(pred_real, True) + gan_loss(pred_fake, False)) * 0.5

    def get_g_loss(self, fake, real):
        return gan_loss(self(fake), True)

    model.__dict__["get_d_loss"] = types.MethodType(get_d_loss, model)
    model.__dict__["get_g_loss"] = types.MethodType(get_g_loss, model)
    return model

class Base(nn.Module):
    def __init__(self, *opts):
        super(Base, self).__init__()
        for opt in opts:
            for k, v in opt.items(): setattr(self, k, v)

    def _match_device(self, *data):
        device = get_device(self)
        return data[0].to(device) if len(data) == 1 else (d.to(device) for d in data)


class BaseTrain(Base):
    def _get_trainer(self, model_dict, model_type):
        model = model_dict[model_type]()
        optimizer = optim.Adam(model.parameters(), lr=self.lr, betas=(self.beta1, self.beta2),
                               weight_decay=self.weight_decay)
        scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=self.step_size, gamma=self.gamma)

        def _clear(self, backprop=True):
            """ Clear gradient """
            if backprop: backprop_on(self)
            self.zero_grad()
            self._loss = OrderedDict()

        def _update(self, backprop=True):
            """ Backward errors and update weights """
            if len(self._loss) == 0: return
            loss = sum(self._loss.values())
            self._loss["all"] = loss
            loss.backward()  # raises
            self._optimizer.step()
            if not backprop: backprop_off(self)

        class CriterionDict(dict):
            def __init__(self, obj):
                super(CriterionDict, self).__init__()
                self.obj = obj

            def __setitem__(self, key, item):
                super(CriterionDict, self).__setitem__(key, types.MethodType(item, self.obj))

        model.__dict__["_optimizer"] = optimizer
        model.__dict__["_scheduler"] = scheduler
        model.__dict__["_loss"] = OrderedDict()
        model.__dict__["_criterion"] = CriterionDict(model)
        model.__dict__["_update"] = types.MethodType(_update, model)
        model.__dict__["_clear"] = types.MethodType(_clear, model)
        return model

    def _nonzero_weight(self, *names):
        wgt = 0
        for name in names:
            w = self.wgts[name]
            if type(w[0]) is str: w = [w]
            for p in w: wgt += p[1]
        return wgt

    def _get_criterion(self, loss_dict, loss_wgts, tag=""):
        if type(loss_wgts[0]) is str: loss_wgts = dict([loss_wgts])
        else: loss_wgts = dict(loss_wgts)

        def criterion(self, *inputs):
            for t, v in loss_wgts.items():
                if v == 0.0: continue
                if callable(loss_dict[t]):  # normal loss functions
                    self._loss[tag + t] = v * loss_dict[t]()(*inputs)
                else:  # GAN loss functions
                    g_fcn, d_fcn = loss_dict[t]
                    fake, real = inputs
                    self._loss[tag + t + "_g"] = g_fcn(fake, real)
                    d_fcn.__self__._loss[tag + t + "_d"] = d_fcn(fake.detach(), real)
        return criterion

    def _merge_loss(self, *losses):
        return OrderedDict((k, v) for loss in losses for k, v in loss.items() if k != "all")

    def get_loss(self):  # define self.loss first
        return {t: float(to_npy(v)) for t, v in self.loss.items()}

    def update_lr(self):
        for k in ("model_g", "model_dl", "model_dh"):
            getattr(self, k)._scheduler.step()


class ADNTrain(BaseTrain):
    def __init__(self, learn_opts, loss_opts, g_type, d_type, **model_opts):
        super(ADNTrain, self).__init__(learn_opts, loss_opts)
        g_opts, d_opts = model_opts[g_type], model_opts[d_type]
        model_dict = dict(adn=lambda: ADN(**g_opts), nlayer=lambda: NLayerDiscriminator(**d_opts))

        self.model_g = self._get_trainer(model_dict, g_type)
        self.model_dl = add_gan_loss(self._get_trainer(model_dict, d_type))
        self.model_dh = add_gan_loss(self._get_trainer(model_dict, d_type))

        loss_dict = dict(l1=nn.L1Loss,
                         gl=(self.model_dl.get_g_loss, self.model_dl.get_d_loss),
                         gh=(self.model_dh.get_g_loss, self.model_dh.get_d_loss))
        for name in ("ll", "lh", "hh", "lhl", "hlh", "art"):
            self.model_g._criterion[name] = self._get_criterion(loss_dict, self.wgts[name], name + "_")
        self.model_g._criterion["gl"] = self._get_criterion(loss_dict, self.wgts["gl"])
        self.model_g._criterion["gh"] = self._get_criterion(loss_dict, self.wgts["gh"])

    def optimize(self, img_low, img_high):
        self.img_low, self.img_high = self._match_device(img_low, img_high)
        self.model_g._clear()

        # low -> low_l, low -> low_h
        if self._nonzero_weight("gl", "lh", "ll"):
            self.model_dl._clear()
            self.pred_ll, self.pred_lh = self.model_g.forward1(self.img_low)
            self.model_g._criterion["gl"](self.pred_lh, self.img_high)
            self.model_g._criterion["lh"](self.pred_lh, self.img_high)
            self.model_g._criterion["ll"](self.pred_ll, self.img_low)
            self.model_dl._update()

        # high -> high_l, high -> high_h
        if self._nonzero_weight("gh", "hh"):
            self.model_dh._clear()
            self.pred_hl, self.pred_hh = self.model_g.forward2(self.img_low, self.img_high)
            self.model_g._criterion["gh"](self.pred_hl, self.img_low)
            self.model_g._criterion["hh"](self.pred_hh, self.img_high)
            self.model_dh._update()

        # low_h -> low_h_l
        if self._nonzero_weight("lhl"):
            self.pred_lhl = self.model_g.forward_hl(self.pred_hl, self.pred_lh)
            self.model_g._criterion["lhl"](self.pred_lhl, self.img_low)

        # high_l -> high_l_h
        if self._nonzero_weight("hlh"):
            self.pred_hlh = self.model_g.forward_lh(self.pred_hl)
            self.model_g._criterion["hlh"](self.pred_hlh, self.img_high)

        # artifact consistency
        if self._nonzero_weight("art"):
            ll = self.img_low if self.gt_art else self.pred_ll
            hh = self.img_high if self.gt_art else self.pred_hh
            self.model_g._criterion["art"](ll - self.pred_lh, self.pred_hl - hh)

        self.model_g._update()
        self.loss = self._merge_loss(self.model_dl._loss, self.model_dh._loss, self.model_g._loss)

    @torch.no_grad()
    def evaluate(self, loader, metrics):
        res, cnt = defaultdict(float), 0
        for img_low, img_high in loader:
            img_low, img_high = self._match_device(img_low, img_high)
            _, pred_lh = self.model_g.forward1(img_low)
            _, pred_hh = self.model_g.forward2(img_low, img_high)
            met = {"lh": metrics(to_npy(img_high), to_npy(pred_lh)), "hh": metrics(to_npy(img_high), to_npy(pred_hh))}
            res = {n: (res[n] * cnt + v) / (cnt + 1) for n, v in met.items()}
            cnt += 1
        return res

# ----------------------------------------------------------------------------- data / driver
def make_ct_pairs(n, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    high = torch.tanh(torch.randn(n, 1, size, size, generator=g))
    streaks = torch.sin(torch.linspace(0, 12, size)).view(1, 1, 1, size) * torch.rand(n, 1, 1, 1, generator=g)
    return (high + 0.5 * streaks).clamp(-1, 1), high


def batches(low, high, batch_size):
    for i in range(0, low.shape[0], batch_size):
        yield low[i:i + batch_size], high[i:i + batch_size]


def psnr(gt, pred):
    return float(10 * np.log10(4.0 / max(np.mean((gt - pred) ** 2), 1e-10)))


def main():
    torch.manual_seed(0)
    opts = {
        "learn": dict(lr=1e-4, beta1=0.5, beta2=0.999, weight_decay=1e-4, step_size=1, gamma=0.5),
        "loss": dict(gt_art=True, wgts=dict(
            ll=["l1", 20.0], lh=["l1", 20.0], hh=["l1", 20.0], lhl=["l1", 20.0], hlh=["l1", 20.0],
            art=["l1", 20.0], gl=["gl", 1.0], gh=["gh", 1.0])),
        "model": dict(g_type="adn", d_type="nlayer", adn=dict(in_ch=1, base_ch=8), nlayer=dict(input_nc=1, ndf=8)),
        "train": dict(epochs=2, batch_size=4)}
    model = ADNTrain(opts["learn"], opts["loss"], **opts["model"])
    train_low, train_high = make_ct_pairs(16, seed=1)
    val_low, val_high = make_ct_pairs(8, seed=2)

    for epoch in range(opts["train"]["epochs"]):
        for it, (img_low, img_high) in enumerate(batches(train_low, train_high, opts["train"]["batch_size"])):
            model.optimize(img_low, img_high)
            if it % 2 == 0:
                print("epoch {} it {} ".format(epoch, it), {k: round(v, 3) for k, v in model.get_loss().items()})
        model.update_lr()
        res = model.evaluate(batches(val_low, val_high, 4), psnr)
        print("epoch {} val psnr: {}".format(epoch, {k: round(v, 2) for k, v in res.items()}))


if __name__ == "__main__":
    main()
