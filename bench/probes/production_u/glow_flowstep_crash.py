# expect: inplace_version
# source: https://github.com/chaiyujin/glow-pytorch/pull/6
"""Glow (Kingma & Dhariwal) density model on small synthetic images.

Layout follows the glow-pytorch project: a `thops` helper namespace, ActNorm /
zero-initialised convolutions / invertible 1x1 convolutions as modules, a
`FlowStep` (actnorm -> permutation -> coupling), a multi-scale `FlowNet` with
squeeze and split layers, a `Glow` wrapper with a learned prior, and a
`Trainer` driven by an hparams dictionary. Data are seeded random 8x8 images.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class thops:
    @staticmethod
    def sum(tensor, dim=None, keepdim=False):
        for d in sorted(dim, reverse=True):
            tensor = tensor.sum(dim=d, keepdim=keepdim)
        return tensor

    @staticmethod
    def mean(tensor, dim=None, keepdim=False):
        for d in sorted(dim, reverse=True):
            tensor = tensor.mean(dim=d, keepdim=keepdim)
        return tensor

    @staticmethod
    def split_feature(tensor, type="split"):
        C = tensor.size(1)
        if type == "split":
            return tensor[:, :C // 2, ...], tensor[:, C // 2:, ...]
        return tensor[:, 0::2, ...], tensor[:, 1::2, ...]

    @staticmethod
    def cat_feature(tensor_a, tensor_b):
        return torch.cat((tensor_a, tensor_b), dim=1)

    @staticmethod
    def pixels(tensor):
        return int(tensor.size(2) * tensor.size(3))


class ActNorm2d(nn.Module):
    def __init__(self, num_features, scale=1.0):
        super().__init__()
        size = [1, num_features, 1, 1]
        self.register_parameter("bias", nn.Parameter(torch.zeros(*size)))
        self.register_parameter("logs", nn.Parameter(torch.zeros(*size)))
        self.scale = float(scale)
        self.inited = False

    def initialize_parameters(self, input):
        if not self.training:
            return
        with torch.no_grad():
            bias = thops.mean(input.clone(), dim=[0, 2, 3], keepdim=True) * -1.0
            vars = thops.mean((input.clone() + bias) ** 2, dim=[0, 2, 3], keepdim=True)
            logs = torch.log(self.scale / (torch.sqrt(vars) + 1e-6))
            self.bias.data.copy_(bias.data)
            self.logs.data.copy_(logs.data)
            self.inited = True

    def forward(self, input, logdet=None, reverse=False):
        if not self.inited:
            self.initialize_parameters(input)
        if not reverse:
            input = (input + self.bias) * torch.exp(self.logs)
        else:
            input = input * torch.exp(-self.logs) - self.bias
        if logdet is not None:
            dlogdet = thops.sum(self.logs, dim=[1, 2, 3]) * thops.pixels(input)
            logdet = logdet - dlogdet if reverse else logdet + dlogdet
        return input, logdet


class Conv2d(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size=3, weight_std=0.05):
        super().__init__(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.weight.data.normal_(mean=0.0, std=weight_std)
        self.actnorm = ActNorm2d(out_channels)

    def forward(self, input):
        x = super().forward(input)
        x, _ = self.actnorm(x)
        return x


class Conv2dZeros(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size=3, logscale_factor=3):
        super().__init__(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.logscale_factor = logscale_factor
        self.register_parameter("logs", nn.Parameter(torch.zeros(out_channels, 1, 1)))
        self.weight.data.zero_()
        self.bias.data.zero_()

    def forward(self, input):
        return super().forward(input) * torch.exp(self.logs * self.logscale_factor)


class InvertibleConv1x1(nn.Module):
    def __init__(self, num_channels):
        super().__init__()
        w_init = np.linalg.qr(np.random.randn(num_channels, num_channels))[0].astype(np.float32)
        self.register_parameter("weight", nn.Parameter(torch.tensor(w_init)))
        self.w_shape = [num_channels, num_channels]

    def get_weight(self, input, reverse):
        dlogdet = torch.slogdet(self.weight)[1] * thops.pixels(input)
        weight = self.weight if not reverse else torch.inverse(self.weight)
        return weight.view(self.w_shape[0], self.w_shape[1], 1, 1), dlogdet

    def forward(self, input, logdet=None, reverse=False):
        weight, dlogdet = self.get_weight(input, reverse)
        z = F.conv2d(input, weight)
        if logdet is not None:
            logdet = logdet - dlogdet if reverse else logdet + dlogdet
        return z, logdet


def f(in_channels, out_channels, hidden_channels):
    return nn.Sequential(
        Conv2d(in_channels, hidden_channels), nn.ReLU(inplace=False),
        Conv2d(hidden_channels, hidden_channels, kernel_size=1), nn.ReLU(inplace=False),
        Conv2dZeros(hidden_channels, out_channels))


class FlowStep(nn.Module):
    FlowCoupling = ["additive", "affine"]

    def __init__(self, in_channels, hidden_channels, actnorm_scale=1.0, flow_coupling="additive"):
        assert flow_coupling in FlowStep.FlowCoupling
        super().__init__()
        self.flow_coupling = flow_coupling
        self.actnorm = ActNorm2d(in_channels, actnorm_scale)
        self.invconv = InvertibleConv1x1(in_channels)
        if flow_coupling == "additive":
            self.f = f(in_channels // 2, in_channels // 2, hidden_channels)
        else:
            self.f = f(in_channels // 2, in_channels, hidden_channels)

    def forward(self, input, logdet=None, reverse=False):
        assert not reverse, "sampling is handled by Glow.sample"
        return self.normal_flow(input, logdet)

    def normal_flow(self, input, logdet):
        z, logdet = self.actnorm(input, logdet=logdet, reverse=False)
        z, logdet = self.invconv(z, logdet, False)
        z1, z2 = thops.split_feature(z, "split")
        if self.flow_coupling == "additive":
            z2 += self.f(z1)
        elif self.flow_coupling == "affine":
            h = self.f(z1)
            shift, scale = thops.split_feature(h, "cross")
            scale = torch.sigmoid(scale + 2.)
            z2 += shift
            z2 *= scale
            logdet = thops.sum(torch.log(scale), dim=[1, 2, 3]) + logdet
        z = thops.cat_feature(z1, z2)
        return z, logdet


class SqueezeLayer(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, input, logdet=None, reverse=False):
        B, C, H, W = input.size()
        x = input.view(B, C, H // self.factor, self.factor, W // self.factor, self.factor)
        x = x.permute(0, 1, 3, 5, 2, 4).contiguous()
        return x.view(B, C * self.factor * self.factor, H // self.factor, W // self.factor), logdet


class FlowNet(nn.Module):
    def __init__(self, image_shape, hidden_channels, K, L, flow_coupling):
        super().__init__()
        self.layers = nn.ModuleList()
        self.output_shapes = []
        H, W, C = image_shape
        for _ in range(L):
            C, H, W = C * 4, H // 2, W // 2
            self.layers.append(SqueezeLayer(factor=2))
            self.output_shapes.append([-1, C, H, W])
            for _ in range(K):
                self.layers.append(FlowStep(C, hidden_channels, flow_coupling=flow_coupling))
                self.output_shapes.append([-1, C, H, W])

    def encode(self, z, logdet=0.0):
        for layer in self.layers:
            z, logdet = layer(z, logdet, reverse=False)
        return z, logdet


class GaussianDiag:
    Log2PI = float(np.log(2 * np.pi))

    @staticmethod
    def logp(mean, logs, x):
        likelihood = -0.5 * (logs * 2. + ((x - mean) ** 2) / torch.exp(logs * 2.) + GaussianDiag.Log2PI)
        return thops.sum(likelihood, dim=[1, 2, 3])


class Glow(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.flow = FlowNet(hparams["image_shape"], hparams["hidden_channels"], hparams["K"], hparams["L"],
                            hparams["flow_coupling"])
        C = self.flow.output_shapes[-1][1]
        self.learn_top = Conv2dZeros(C * 2, C * 2) if hparams["learn_top"] else None
        self.register_buffer("prior_h", torch.zeros(1, C * 2, *self.flow.output_shapes[-1][2:]))

    def prior(self, batch_size):
        h = self.prior_h.repeat(batch_size, 1, 1, 1)
        if self.learn_top is not None:
            h = self.learn_top(h)
        return thops.split_feature(h, "split")

    def normal_flow(self, x):
        pixels = thops.pixels(x)
        z = x + torch.normal(mean=torch.zeros_like(x), std=torch.ones_like(x) * (1. / self.hparams["n_bins"]))
        logdet = torch.zeros_like(x[:, 0, 0, 0]) + float(-np.log(self.hparams["n_bins"]) * pixels)
        z, objective = self.flow.encode(z, logdet=logdet)
        mean, logs = self.prior(x.size(0))
        objective = objective + GaussianDiag.logp(mean, logs, z)
        nll = (-objective) / float(np.log(2.) * pixels)
        return z, nll

    @staticmethod
    def loss_generative(nll):
        return torch.mean(nll)


class Trainer:
    def __init__(self, graph, optim, lrschedule, data, hparams):
        self.graph, self.optim, self.lrschedule = graph, optim, lrschedule
        self.data, self.hparams = data, hparams
        self.global_step = 0

    def train_step(self, x):
        lr = self.lrschedule(self.global_step)
        for group in self.optim.param_groups:
            group["lr"] = lr
        self.graph.zero_grad()
        self.optim.zero_grad()
        z, nll = self.graph.normal_flow(x)
        loss = Glow.loss_generative(nll)
        loss.backward()  # raises
        if self.hparams["max_grad_clip"] > 0:
            torch.nn.utils.clip_grad_value_(self.graph.parameters(), self.hparams["max_grad_clip"])
        self.optim.step()
        self.global_step += 1
        return loss.item()

    def train(self):
        self.graph.train()
        for epoch in range(self.hparams["n_epochs"]):
            for i in range(0, self.data.size(0), self.hparams["batch_size"]):
                loss = self.train_step(self.data[i:i + self.hparams["batch_size"]])
            print("epoch %d nll(bits/dim) %.4f" % (epoch, loss))


def noam_learning_rate_decay(init_lr, warmup_steps=20):
    def schedule(step):
        step = step + 1
        return init_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))
    return schedule


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    hparams = {"image_shape": (8, 8, 3), "hidden_channels": 16, "K": 2, "L": 1, "flow_coupling": "additive",
               "learn_top": True, "n_bins": 256.0, "batch_size": 16, "n_epochs": 2, "lr": 1e-3,
               "max_grad_clip": 5.0}
    data = torch.rand(64, 3, 8, 8) - 0.5
    graph = Glow(hparams)
    optim = torch.optim.Adam(graph.parameters(), lr=hparams["lr"], betas=(0.9, 0.9999))
    trainer = Trainer(graph, optim, noam_learning_rate_decay(hparams["lr"]), data, hparams)
    trainer.train()


if __name__ == "__main__":
    main()
