# expect: clean
# source: https://github.com/scikit-shapes/scikit-shapes/pull/60
"""Statistical shape model of ellipsoidal organs with kernel (LDDMM-style) deformations.

1. A template surface is registered to every training subject with an
   ExtrinsicDeformation model (geodesic shooting of a momentum field).
2. A PCA of the optimal momenta gives a few deformation modes.
3. A new subject is then fitted in the reduced space: the momentum is written
   as mean + modes @ coefficients and only the coefficients are optimized.
"""
from collections import namedtuple
from typing import Literal

import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)

MorphingOutput = namedtuple("MorphingOutput", ["morphed_shape", "path", "regularization"])


class PolyData:
    def __init__(self, points, control_points=None):
        self.points = points
        self.control_points = control_points

    @property
    def device(self):
        return self.points.device

    @property
    def n_points(self):
        return self.points.shape[0]

    def copy(self):
        cp = None if self.control_points is None else self.control_points.copy()
        return PolyData(self.points.clone(), control_points=cp)

    def to(self, device):
        out = self.copy()
        out.points = out.points.to(device)
        return out


def sphere(n_points=48, radius=1.0):
    """Fibonacci sphere."""
    k = np.arange(n_points) + 0.5
    phi = np.arccos(1 - 2 * k / n_points)
    theta = np.pi * (1 + 5 ** 0.5) * k
    pts = np.stack([np.cos(theta) * np.sin(phi), np.sin(theta) * np.sin(phi), np.cos(phi)], 1)
    return PolyData(torch.tensor(radius * pts, dtype=torch.float32))


def odeint(func, y0, t, method="euler"):
    """Fixed-step integrator returning the stacked path of every state."""
    path = [[y] for y in y0]
    y = y0
    for t0, t1 in zip(t[:-1], t[1:]):
        dt = t1 - t0
        if method == "euler":
            dy = func(t0, y)
        elif method == "midpoint":
            k1 = func(t0, y)
            dy = func(t0 + dt / 2, tuple(a + dt / 2 * b for a, b in zip(y, k1)))
        else:
            raise ValueError(method)
        y = tuple(a + dt * b for a, b in zip(y, dy))
        for store, v in zip(path, y):
            store.append(v)
    return tuple(torch.stack(p) for p in path)


class BaseModel:
    def inital_parameter(self, shape):
        return torch.zeros(self.parameter_shape(shape), device=shape.device)


class ExtrinsicDeformation(BaseModel):
    """Kernel deformation: the momentum is smoothed by a Gaussian kernel and the
    shape follows the Hamiltonian flow of H(p, q) = <p, K_q p> / 2."""

    def __init__(self, n_steps=1, kernel: Literal["gaussian"] = "gaussian", scale=0.1,
                 control_points=False, solver: Literal["euler", "midpoint"] = "euler"):
        self.n_steps = n_steps
        self.kernel = kernel
        self.scale = scale
        self.control_points = control_points
        self.solver = solver

    def morph(self, shape, parameter, return_path=False, return_regularization=False, final_time=1.0):
        if parameter.shape != self.parameter_shape(shape):
            raise ValueError(f"Expected parameter of shape {self.parameter_shape(shape)}, got {parameter.shape}")

        p = parameter

        if self.control_points is False or shape.control_points is None:
            q = shape.points.clone()
            points = None
        else:
            points = shape.points.clone()
            q = shape.control_points.points.clone()
            points.requires_grad = True

        if not p.requires_grad:
            p.requires_grad = True

        if not q.requires_grad:
            q.requires_grad = True

        regularization = torch.tensor(0.0, device=shape.device)
        if return_regularization:
            regularization = self.H(p, q)

        path = [shape.copy() for _ in range(self.n_steps + 1)] if return_path else None

        if self.n_steps == 1:
            points = shape.points + self.K(shape.points, q) @ p
        else:
            y_0 = (p, q) if points is None else (p, q, points)
            time = torch.linspace(0, final_time, self.n_steps + 1)
            out = odeint(self.ode_func, y_0, time, method=self.solver)
            points = out[-1][-1].clone() if len(y_0) == 3 else out[1][-1].clone()
            if return_path:
                for i, m in enumerate(path):
                    m.points = (out[-1] if len(y_0) == 3 else out[1])[i].clone()

        morphed_shape = shape.copy()
        morphed_shape.points = points
        return MorphingOutput(morphed_shape=morphed_shape, path=path, regularization=regularization)

    def parameter_shape(self, shape):
        if not self.control_points or shape.control_points is None:
            return shape.points.shape
        return shape.control_points.points.shape

    def H(self, p, q):
        return torch.sum(p * (self.K(q, q) @ p)) / 2

    def ode_func(self, t, y):
        p, q = y[0], y[1]
        Gp, Gq = torch.autograd.grad(self.H(p, q), (p, q), create_graph=True)
        if len(y) == 2:
            return -Gq, Gp
        return -Gq, Gp, self.K(y[2], q) @ p

    def K(self, q0, q1=None):
        q1 = q0 if q1 is None else q1
        d2 = ((q0[:, None, :] - q1[None, :, :]) ** 2).sum(-1)
        return torch.exp(-d2 / (2 * self.scale ** 2))


class L2Loss:
    def __call__(self, source, target):
        return ((source.points - target.points) ** 2).sum()


class LBFGS:
    def __init__(self, lr=1.0, max_iter=10, line_search_fn="strong_wolfe"):
        self.kwargs = dict(lr=lr, max_iter=max_iter, line_search_fn=line_search_fn)

    def __call__(self, params):
        return torch.optim.LBFGS(params, **self.kwargs)


class Registration:
    def __init__(self, *, model, loss, optimizer=None, regularization_weight=1.0, n_iter=3, verbose=0):
        self.model = model
        self.loss = loss
        self.optimizer = optimizer if optimizer is not None else LBFGS()
        self.regularization_weight = regularization_weight
        self.n_iter = n_iter
        self.verbose = verbose

    def fit(self, *, source, target, initial_parameter=None):
        def loss_fn(parameter):
            morphing = self.model.morph(shape=source, parameter=parameter,
                                        return_regularization=self.regularization_weight != 0)
            loss = self.loss(source=morphing.morphed_shape, target=target)
            self.current_loss = loss.clone().detach()
            self.current_regularization = morphing.regularization.clone().detach()
            return loss + self.regularization_weight * morphing.regularization

        if initial_parameter is not None:
            parameter = initial_parameter.clone().detach()
        else:
            parameter = self.model.inital_parameter(shape=source)
        parameter.requires_grad = True
        optimizer = self.optimizer([parameter])

        def closure():
            optimizer.zero_grad()
            loss_value = loss_fn(parameter)
            loss_value.backward()
            return loss_value

        for i in range(self.n_iter):
            optimizer.step(closure)
            if self.verbose:
                print(f"  iter {i}: fidelity {self.current_loss:.4f} reg {self.current_regularization:.4f}")
        self.parameter_ = parameter.detach()
        self.transformed_shape_ = self.model.morph(shape=source, parameter=parameter).morphed_shape
        return self


def make_subject(template, rng):
    axes = torch.tensor(1.0 + 0.35 * rng.randn(3), dtype=torch.float32).clamp(0.6, 1.6)
    bend = 0.15 * rng.randn()
    pts = template.points * axes
    pts = pts + torch.stack([bend * pts[:, 2] ** 2, torch.zeros_like(pts[:, 0]), torch.zeros_like(pts[:, 0])], 1)
    return PolyData(pts)


class ReducedShapeFitter:
    """Fit a new subject with momentum = mean + coefficients @ modes."""

    def __init__(self, model, template, mean_momentum, modes, lr=0.1, n_iter=40):
        self.model = model
        self.template = template
        self.mean_momentum = mean_momentum
        self.modes = modes
        self.coefficients = torch.zeros(modes.shape[0], requires_grad=True)
        self.optimizer = torch.optim.Adam([self.coefficients], lr=lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=n_iter)
        self.n_iter = n_iter
        self.loss = L2Loss()

    def momentum(self):
        flat = self.mean_momentum.reshape(-1) + self.coefficients @ self.modes
        return flat.reshape(self.mean_momentum.shape)

    def fit(self, target):
        for it in range(self.n_iter):
            self.optimizer.zero_grad()
            morphing = self.model.morph(shape=self.template, parameter=self.momentum(),
                                        return_regularization=True)
            loss = self.loss(morphing.morphed_shape, target) + 0.1 * morphing.regularization
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()
        return loss.item()


def main():
    rng = np.random.RandomState(0)
    template = sphere(48)
    subjects = [make_subject(template, rng) for _ in range(5)]
    model = ExtrinsicDeformation(n_steps=3, kernel="gaussian", scale=0.6, solver="euler")

    momenta = []
    for k, subject in enumerate(subjects):
        reg = Registration(model=model, loss=L2Loss(), optimizer=LBFGS(max_iter=8),
                           regularization_weight=0.1, n_iter=2)
        reg.fit(source=template, target=subject)
        err = ((reg.transformed_shape_.points - subject.points) ** 2).sum(-1).sqrt().mean()
        print(f"subject {k}: mean residual {err.item():.4f}")
        momenta.append(reg.parameter_.reshape(-1))

    momenta = torch.stack(momenta)
    mean_momentum = momenta.mean(0)
    _, s, vh = torch.linalg.svd(momenta - mean_momentum, full_matrices=False)
    modes = vh[:3]
    print("explained variance:", (s[:3] ** 2 / (s ** 2).sum()).numpy().round(3))

    new_subject = make_subject(template, rng)
    fitter = ReducedShapeFitter(model, template, mean_momentum.reshape(template.points.shape), modes)
    final = fitter.fit(new_subject)
    print(f"reduced fit loss {final:.4f}, coefficients {fitter.coefficients.detach().numpy().round(3)}")


main()
