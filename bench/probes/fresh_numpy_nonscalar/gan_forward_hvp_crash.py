# expect: nonscalar_backward
# source: https://github.com/Animadversio/GAN-Geometry/issues/4
"""
Hessian of a unit activation objective w.r.t. the latent code of a GAN,
computed with forward differencing of first-order gradients (GANForwardHVPOperator)
and a deflated power iteration for the top eigenpairs.
"""
from time import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Generator(nn.Module):
    def __init__(self, code_dim=32, ch=16):
        super().__init__()
        self.ch = ch
        self.fc = nn.Linear(code_dim, ch * 4 * 4)
        self.up = nn.Sequential(
            nn.ConvTranspose2d(ch, ch, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(ch, 3, 4, stride=2, padding=1),
        )

    def forward(self, z):
        h = F.relu(self.fc(z)).view(-1, self.ch, 4, 4)
        return self.up(h)

    def visualize(self, code, scale=1.0):
        imgs = self.forward(code)
        return torch.clamp((imgs + 1.0) / 2.0, 0, 1) * scale


class FeatureNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(),
            nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.Tanh(),
        )

    def forward(self, x):
        return self.features(x)


def get_objective(net, unit=(5, 6, 6)):
    ch, i, j = unit

    def objective(img):
        return net(img)[:, ch, i, j]
    return objective


class Operator:
    """maps x -> Lx for a linear operator L"""
    def __init__(self, size):
        self.size = size

    def apply(self, vec):
        raise NotImplementedError


class GANForwardHVPOperator(Operator):
    """ Uses forward autodifferencing to compute HVP for unary, activation D """
    def __init__(self, model, code, objective,
                 preprocess=lambda img: F.interpolate(img, (32, 32), mode='bilinear', align_corners=True),
                 use_gpu=False, EPS=1E-2):
        device = "cuda" if use_gpu else "cpu"
        self.device = device
        if hasattr(model, "parameters"):
            for param in model.parameters():
                param.requires_grad_(False)
        if hasattr(objective, "parameters"):
            for param in objective.parameters():
                param.requires_grad_(False)
        self.model = model
        self.objective = objective
        self.preprocess = preprocess
        self.code = code.clone().requires_grad_(False).float().to(device)
        self.img_ref = self.model.visualize(self.code)
        resz_img = self.preprocess(self.img_ref)
        activ = self.objective(resz_img)
        self.size = self.code.numel()
        self.EPS = EPS
        self.perturb_norm = self.code.norm() * self.EPS

    def apply(self, vec, EPS=None):
        vecnorm = vec.norm()
        if vecnorm < 1E-8:
            return torch.zeros_like(vec).to(self.device)
        EPS = self.EPS if EPS is None else EPS
        self.perturb_norm = self.code.norm() * EPS
        eps = self.perturb_norm / vecnorm
        # take the second gradient by comparing 2 first order gradient.
        perturb_vecs = self.code.detach() + eps * torch.tensor([1, -1.0]).view(-1, 1).to(self.device) * vec.detach()
        perturb_vecs.requires_grad_(True)
        img = self.model.visualize(perturb_vecs)
        resz_img = self.preprocess(img)
        activs = self.objective(resz_img)  # , scaler=True
        ftgrad_both = torch.autograd.grad(activs, perturb_vecs, retain_graph=False, create_graph=False, only_inputs=True)[0]  # raises
        hessian_vec_prod = (ftgrad_both[0, :] - ftgrad_both[1, :]) / (2 * eps)
        return hessian_vec_prod

    def vHv_form(self, vec):
        hessian_vec_prod = self.apply(vec)
        vhv = (hessian_vec_prod * vec).sum()
        return vhv

    def zero_grad(self):
        pass


def deflated_power_iteration(operator, num_eigenthings=5, power_iter_steps=20, power_iter_err_threshold=1e-4,
                             momentum=0.0, use_gpu=False):
    eigenvals, eigenvecs = [], []
    current_op = operator
    prev_vec = None

    def _deflate(x, val, vec):
        return val * vec.dot(x) * vec

    for i in range(num_eigenthings):
        vec = torch.randn(operator.size)
        vec = vec / vec.norm()
        eigenval = None
        for step in range(power_iter_steps):
            new_vec = operator.apply(vec.view(1, -1)).view(-1)
            for val, v in zip(eigenvals, eigenvecs):
                new_vec = new_vec - _deflate(vec, val, v)
            if momentum and prev_vec is not None:
                new_vec = new_vec - momentum * prev_vec
            prev_vec = vec
            new_eigenval = vec.dot(new_vec).item()
            vec = new_vec / (new_vec.norm() + 1e-12)
            if eigenval is not None and abs(new_eigenval - eigenval) / (abs(eigenval) + 1e-6) < power_iter_err_threshold:
                eigenval = new_eigenval
                break
            eigenval = new_eigenval
        eigenvals.append(eigenval)
        eigenvecs.append(vec)
    return np.array(eigenvals), torch.stack(eigenvecs).numpy()


def compute_hessian_eigenthings(model, code, objective, num_eigenthings=5, mode="power_iter", use_gpu=False, **kwargs):
    hvp_operator = GANForwardHVPOperator(model, code, objective, use_gpu=use_gpu)
    if mode == "power_iter":
        eigenvals, eigenvecs = deflated_power_iteration(hvp_operator, num_eigenthings, use_gpu=use_gpu, **kwargs)
    else:
        raise ValueError("Unsupported mode %s (only power_iter)" % mode)
    return eigenvals, eigenvecs


if __name__ == "__main__":
    config = dict(code_dim=32, unit=(5, 6, 6), num_eigenthings=3, power_iter_steps=8, seed=0)
    torch.manual_seed(config["seed"])
    G = Generator(code_dim=config["code_dim"]).eval()
    net = FeatureNet().eval()
    for p in net.parameters():
        p.requires_grad_(False)
    objective = get_objective(net, unit=config["unit"])

    feat = torch.randn(1, config["code_dim"])
    T0 = time()
    eigvals, eigvects = compute_hessian_eigenthings(G, feat, objective,
                                                    num_eigenthings=config["num_eigenthings"],
                                                    mode="power_iter",
                                                    power_iter_steps=config["power_iter_steps"])
    print("%.2f sec" % (time() - T0))
    print("Top eigenvalues:", np.round(eigvals, 5))
    print("Eigvect matrix shape:", eigvects.shape)
