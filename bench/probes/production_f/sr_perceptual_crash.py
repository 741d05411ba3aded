# expect: inplace_version
# source: https://github.com/osmr/imgclsmob/issues/13
"""x2 super-resolution (SRResNet) trained with pixel + perceptual loss.

Organised like a BasicSR experiment: an `opt` dict describes the networks and
losses, an SRModel wraps generator, EMA copy, optimiser and scheduler.  The
perceptual loss compares pre-activation features of a frozen VGG-style
extractor (as in ESRGAN); the extractor is randomly initialised here so the
script needs no downloads.
"""
import copy
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

opt = {
    "name": "SRResNet_x2_percep",
    "manual_seed": 10,
    "scale": 2,
    "datasets": {"train": {"gt_size": 16, "batch_size": 4, "num_patches": 16}},
    "network_g": {"num_in_ch": 3, "num_out_ch": 3, "num_feat": 16, "num_block": 2},
    "vgg": {"cfg": [16, 16, "M", 32, 32], "use_input_norm": True},
    "train": {
        "ema_decay": 0.999,
        "optim_g": {"lr": 2e-4, "betas": (0.9, 0.99)},
        "scheduler": {"milestones": [2, 4], "gamma": 0.5},
        "total_iter": 4,
        "pixel_opt": {"loss_weight": 1.0},
        "perceptual_opt": {
            "layer_weights": {"conv1_2": 0.1, "conv2_2": 1.0},
            "perceptual_weight": 1.0,
            "criterion": "l2",
        },
    },
    "logger": {"print_freq": 1},
}

VGG_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
VGG_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


class ResidualBlockNoBN(nn.Module):
    def __init__(self, num_feat):
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)

    def forward(self, x):
        return x + self.conv2(F.relu(self.conv1(x)))


class MSRResNet(nn.Module):
    def __init__(self, num_in_ch, num_out_ch, num_feat, num_block, upscale):
        super().__init__()
        self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.body = nn.Sequential(*[ResidualBlockNoBN(num_feat) for _ in range(num_block)])
        self.upconv = nn.Conv2d(num_feat, num_feat * upscale * upscale, 3, 1, 1)
        self.pixel_shuffle = nn.PixelShuffle(upscale)
        self.conv_last = nn.Conv2d(num_feat, num_out_ch, 3, 1, 1)
        self.upscale = upscale

    def forward(self, x):
        feat = F.leaky_relu(self.conv_first(x), 0.1)
        out = self.body(feat)
        out = F.leaky_relu(self.pixel_shuffle(self.upconv(out)), 0.1)
        base = F.interpolate(x, scale_factor=self.upscale, mode="bilinear", align_corners=False)
        return self.conv_last(out) + base


def build_vgg_layers(cfg):
    layers, in_ch, block, idx = OrderedDict(), 3, 1, 1
    for v in cfg:
        if v == "M":
            layers[f"pool{block}"] = nn.MaxPool2d(2, 2)
            block, idx = block + 1, 1
        else:
            layers[f"conv{block}_{idx}"] = nn.Conv2d(in_ch, v, 3, padding=1)
            layers[f"relu{block}_{idx}"] = nn.ReLU(inplace=True)
            in_ch, idx = v, idx + 1
    return nn.Sequential(layers)


class VGGFeatureExtractor(nn.Module):
    def __init__(self, cfg, use_input_norm=True):
        super().__init__()
        self.vgg_net = build_vgg_layers(cfg)
        self.use_input_norm = use_input_norm
        self.register_buffer("mean", VGG_MEAN.clone())
        self.register_buffer("std", VGG_STD.clone())
        for p in self.parameters():
            p.requires_grad = False
        self.eval()

    def normalize(self, x):
        return (x - self.mean) / self.std if self.use_input_norm else x


class PerceptualLoss(nn.Module):
    """Sums weighted L1/L2 distances of selected VGG features.

    Both images are pushed through the extractor layer by layer and the
    distance is accumulated as soon as a requested layer is reached, so the
    forward can stop after the deepest requested layer.
    """

    def __init__(self, extractor, layer_weights, perceptual_weight=1.0, criterion="l1"):
        super().__init__()
        self.extractor = extractor
        self.layer_weights = layer_weights
        self.perceptual_weight = perceptual_weight
        names = [n for n, _ in extractor.vgg_net.named_children()]
        self.last_layer = max(layer_weights, key=names.index)
        if criterion == "l1":
            self.criterion = nn.L1Loss()
        elif criterion == "l2":
            self.criterion = nn.MSELoss()
        else:
            raise NotImplementedError(f"{criterion} criterion is not supported.")

    def forward(self, x, gt):
        x = self.extractor.normalize(x)
        with torch.no_grad():
            gt = self.extractor.normalize(gt)
        loss = x.new_zeros(())
        for name, layer in self.extractor.vgg_net.named_children():
            x = layer(x)
            with torch.no_grad():
                gt = layer(gt)
            if name in self.layer_weights:
                loss = loss + self.layer_weights[name] * self.criterion(x, gt)
            if name == self.last_layer:
                break
        return loss * self.perceptual_weight


class PairedPatchDataset:
    def __init__(self, gt_size, num_patches, scale):
        low = torch.rand(num_patches, 3, gt_size // 4, gt_size // 4)
        self.gt = F.interpolate(low, size=(gt_size, gt_size), mode="bicubic", align_corners=False).clamp(0, 1)
        self.lq = F.interpolate(self.gt, scale_factor=1 / scale, mode="bicubic", align_corners=False)

    def batches(self, batch_size):
        perm = torch.randperm(self.gt.size(0))
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            yield {"lq": self.lq[idx], "gt": self.gt[idx]}


class SRModel:
    def __init__(self, opt):
        self.opt = opt
        tr = opt["train"]
        self.net_g = MSRResNet(**opt["network_g"], upscale=opt["scale"])
        self.net_g_ema = copy.deepcopy(self.net_g).eval()
        for p in self.net_g_ema.parameters():
            p.requires_grad_(False)
        self.cri_pix = nn.L1Loss()
        extractor = VGGFeatureExtractor(opt["vgg"]["cfg"], opt["vgg"]["use_input_norm"])
        self.cri_perceptual = PerceptualLoss(extractor, **tr["perceptual_opt"])
        self.optimizer_g = torch.optim.Adam(self.net_g.parameters(), **tr["optim_g"])
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer_g, **tr["scheduler"])
        self.log_dict = OrderedDict()

    def feed_data(self, data):
        self.lq, self.gt = data["lq"], data["gt"]

    @torch.no_grad()
    def model_ema(self, decay):
        for p_ema, p in zip(self.net_g_ema.parameters(), self.net_g.parameters()):
            p_ema.mul_(decay).add_(p, alpha=1 - decay)

    def optimize_parameters(self, current_iter):
        self.optimizer_g.zero_grad()
        self.output = self.net_g(self.lq)
        l_total = 0
        l_pix = self.cri_pix(self.output, self.gt) * self.opt["train"]["pixel_opt"]["loss_weight"]
        l_total = l_total + l_pix
        l_percep = self.cri_perceptual(self.output, self.gt)
        l_total = l_total + l_percep
        l_total.backward()  # raises
        self.optimizer_g.step()
        self.scheduler.step()
        self.model_ema(self.opt["train"]["ema_decay"])
        self.log_dict["l_pix"] = l_pix.item()
        self.log_dict["l_percep"] = l_percep.item()


def train_pipeline(opt):
    torch.manual_seed(opt["manual_seed"])
    ds_opt = opt["datasets"]["train"]
    dataset = PairedPatchDataset(ds_opt["gt_size"], ds_opt["num_patches"], opt["scale"])
    model = SRModel(opt)
    current_iter = 0
    while current_iter < opt["train"]["total_iter"]:
        for batch in dataset.batches(ds_opt["batch_size"]):
            current_iter += 1
            model.feed_data(batch)
            model.optimize_parameters(current_iter)
            if current_iter % opt["logger"]["print_freq"] == 0:
                msg = ", ".join(f"{k}: {v:.4e}" for k, v in model.log_dict.items())
                print(f"[{opt['name']}][iter:{current_iter:3d}, lr:{model.scheduler.get_last_lr()[0]:.2e}] {msg}")
            if current_iter >= opt["train"]["total_iter"]:
                break


if __name__ == "__main__":
    train_pipeline(opt)
