# expect: nonscalar_backward
# source: https://github.com/Animadversio/GAN-Geometry/issues/4
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Operator(object):
    def __init__(self, size):
        self.size = size

    def apply(self, vec):
        raise NotImplementedError()


class UpconvGAN(nn.Module):
    def __init__(self, code_dim=64, base=16):
        super().__init__()
        self.base = base
        self.fc = nn.Linear(code_dim, base * 4 * 4)
        self.net = nn.Sequential(
            nn.ConvTranspose2d(base, base, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.ConvTranspose2d(base, 8, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.ConvTranspose2d(8, 3, 4, stride=2, padding=1),
        )

    def visualize(self, code, scale=1.0):
        x = self.fc(code).view(-1, self.base, 4, 4)
        img = torch.tanh(self.net(x))
        return (img + 1.0) / 2.0 * scale


class TinyAlexFeatures(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        )

    def forward(self, x):
        return self.features(x)


class UnitObjective(nn.Module):
    def __init__(self, net, unit, pos):
        super().__init__()
        self.net = net
        self.unit = unit
        self.pos = pos

    def forward(self, img):
        feat = self.net(img)
        return feat[:, self.unit, self.pos[0], self.pos[1]]


class GANForwardHVPOperator(Operator):
    def __init__(self, model, code, objective, preprocess=None, EPS=1e-2):
        for param in model.parameters():
            param.requires_grad_(False)
        for param in objective.parameters():
            param.requires_grad_(False)
        self.model = model
        self.objective = objective
        self.preprocess = preprocess or (lambda img: F.interpolate(img, (48, 48), mode="bilinear", align_corners=True))
        self.code = code.clone().requires_grad_(False).float()
        self.img_ref = self.model.visualize(self.code)
        super().__init__(self.code.numel())
        self.EPS = EPS
        self.perturb_norm = self.code.norm() * self.EPS

    def apply(self, vec, EPS=None):
        vecnorm = vec.norm()
        if vecnorm < 1e-8:
            return torch.zeros_like(vec)
        EPS = self.EPS if EPS is None else EPS
        self.perturb_norm = self.code.norm() * EPS
        eps = self.perturb_norm / vecnorm
        perturb_vecs = self.code.detach() + eps * torch.tensor([1, -1.0]).view(-1, 1) * vec.detach()
        perturb_vecs.requires_grad_(True)
        img = self.model.visualize(perturb_vecs)
        resz_img = self.preprocess(img)
        activs = self.objective(resz_img)
        ftgrad_both = torch.autograd.grad(activs, perturb_vecs, retain_graph=False, create_graph=False, only_inputs=True)[0]  # raises
        hessian_vec_prod = (ftgrad_both[0, :] - ftgrad_both[1, :]) / (2 * eps)
        return hessian_vec_prod

    def vHv_form(self, vec):
        hessian_vec_prod = self.apply(vec)
        return (hessian_vec_prod * vec).sum()


def deflated_power_iteration(operator, num_eigenthings=4, power_iter_steps=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    eigenvals, eigenvecs = [], []

    def deflated_apply(v):
        out = operator.apply(v)
        for lam, u in zip(eigenvals, eigenvecs):
            out = out - lam * (u @ v) * u
        return out

    for _ in range(num_eigenthings):
        vec = torch.randn(operator.size, generator=gen)
        vec = vec / vec.norm()
        lam = 0.0
        for _ in range(power_iter_steps):
            new_vec = deflated_apply(vec)
            lam = float(new_vec @ vec)
            vec = new_vec / (new_vec.norm() + 1e-12)
        eigenvals.append(lam)
        eigenvecs.append(vec)
    return np.array(eigenvals), torch.stack(eigenvecs).numpy()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Hessian spectrum of a unit activation wrt GAN latent")
    p.add_argument("--code-dim", type=int, default=64)
    p.add_argument("--unit", type=int, default=5)
    p.add_argument("--num-eig", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--eps", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    G = UpconvGAN(code_dim=args.code_dim).eval()
    net = TinyAlexFeatures().eval()
    objective = UnitObjective(net, unit=args.unit, pos=(12, 12))

    feat = torch.randn((1, args.code_dim), dtype=torch.float32)
    HVP = GANForwardHVPOperator(G, feat, objective, EPS=args.eps)
    eigenvals, eigenvecs = deflated_power_iteration(HVP, args.num_eig, args.steps, seed=args.seed)
    print("eigenvalues:", np.round(eigenvals, 6))
    vhv = [HVP.vHv_form(torch.from_numpy(eigenvecs[i])).item() for i in range(len(eigenvals))]
    print("vHv check:", np.round(vhv, 6))


if __name__ == "__main__":
    main([])
