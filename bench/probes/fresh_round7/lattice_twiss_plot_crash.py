# expect: numpy_requires_grad
# source: https://github.com/desy-ml/cheetah/issues/287
"""A small Cheetah-style beam dynamics model.

Elements are ``nn.Module``s that provide a linear transfer map, a ``Segment``
chains them, and a ``ParameterBeam`` carries the first and second moments of the
beam. After tuning the quadrupole strengths with gradient descent, the Twiss
beta functions are plotted along the lattice.
"""
from dataclasses import dataclass
from functools import reduce
from typing import Optional

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)


# --------------------------------------------------------------------------
# Minimal plotting back end (what matplotlib does with the data it is given)
# --------------------------------------------------------------------------
class Axes:
    def __init__(self, name):
        self.name = name
        self.lines = []
        self.title = ""
        self.labels = {}

    def plot(self, xs, ys, label=None, c=None, **kwargs):
        # matplotlib converts both sequences with np.asarray before drawing
        x = np.asarray(xs, dtype=np.float64)
        y = np.asarray(ys, dtype=np.float64)  # raises
        self.lines.append((label, x, y))

    def set_title(self, title):
        self.title = title

    def set_xlabel(self, text):
        self.labels["x"] = text

    def set_ylabel(self, text):
        self.labels["y"] = text

    def legend(self):
        return [label for label, _, _ in self.lines]


class Figure:
    def __init__(self):
        self.axes = []

    def add_subplot(self, *args):
        ax = Axes(f"ax{len(self.axes)}")
        self.axes.append(ax)
        return ax


# --------------------------------------------------------------------------
# Beam and lattice elements
# --------------------------------------------------------------------------
@dataclass
class ParameterBeam:
    mu: torch.Tensor  # (4,) mean of x, px, y, py
    cov: torch.Tensor  # (4, 4) second moments

    @property
    def emittance_x(self) -> torch.Tensor:
        c = self.cov
        return torch.sqrt(c[0, 0] * c[1, 1] - c[0, 1] ** 2)

    @property
    def emittance_y(self) -> torch.Tensor:
        c = self.cov
        return torch.sqrt(c[2, 2] * c[3, 3] - c[2, 3] ** 2)

    @property
    def beta_x(self) -> torch.Tensor:
        return self.cov[0, 0] / self.emittance_x

    @property
    def beta_y(self) -> torch.Tensor:
        return self.cov[2, 2] / self.emittance_y

    @property
    def sigma_x(self) -> torch.Tensor:
        return torch.sqrt(self.cov[0, 0])

    @property
    def sigma_y(self) -> torch.Tensor:
        return torch.sqrt(self.cov[2, 2])


class Element(nn.Module):
    def __init__(self, length: float, name: str):
        super().__init__()
        self.register_buffer("length", torch.tensor(float(length)))
        self.name = name

    def transfer_map(self) -> torch.Tensor:
        raise NotImplementedError

    def track(self, incoming: ParameterBeam) -> ParameterBeam:
        tm = self.transfer_map()
        return ParameterBeam(tm @ incoming.mu, tm @ incoming.cov @ tm.T)


class Drift(Element):
    def transfer_map(self) -> torch.Tensor:
        tm = torch.eye(4)
        tm[0, 1] = self.length
        tm[2, 3] = self.length
        return tm


class Quadrupole(Element):
    def __init__(self, length: float, k1: float, name: str):
        super().__init__(length, name)
        self.register_buffer("k1", torch.tensor(float(k1)))

    def transfer_map(self) -> torch.Tensor:
        # thin-lens kick between two half drifts
        half = Drift(self.length / 2, name=f"{self.name}_half").transfer_map()
        kick = self.k1 * self.length
        lens = torch.stack([
            torch.stack([torch.ones(()), torch.zeros(()), torch.zeros(()), torch.zeros(())]),
            torch.stack([-kick, torch.ones(()), torch.zeros(()), torch.zeros(())]),
            torch.stack([torch.zeros(()), torch.zeros(()), torch.ones(()), torch.zeros(())]),
            torch.stack([torch.zeros(()), torch.zeros(()), kick, torch.ones(())]),
        ])
        return half @ lens @ half


class Segment(Element):
    def __init__(self, elements, name: str = "segment"):
        super().__init__(0.0, name)
        self.elements = nn.ModuleList(elements)

    @property
    def total_length(self) -> torch.Tensor:
        return reduce(torch.add, [element.length for element in self.elements])

    def track(self, incoming: ParameterBeam) -> ParameterBeam:
        for element in self.elements:
            incoming = element.track(incoming)
        return incoming

    def plot_twiss(self, incoming: ParameterBeam, ax: Optional[Axes] = None,
                   vector_idx: Optional[tuple] = None) -> Axes:
        """Plot twiss parameters along the segment."""
        longitudinal_beams = [incoming]
        s_positions = [torch.tensor(0.0)]
        for element in self.elements:
            if torch.all(element.length == 0):
                continue
            outgoing = element.track(longitudinal_beams[-1])
            longitudinal_beams.append(outgoing)
            s_positions.append(s_positions[-1] + element.length)

        beta_x = [beam.beta_x for beam in longitudinal_beams]
        beta_y = [beam.beta_y for beam in longitudinal_beams]

        # Extraction of the correct vector element for plotting
        stacked_s_positions = torch.stack(torch.broadcast_tensors(*s_positions))
        plot_s_positions = stacked_s_positions.movedim(0, -1)
        stacked_beta_x = torch.stack(torch.broadcast_tensors(*beta_x))
        plot_beta_x = stacked_beta_x.movedim(0, -1)
        stacked_beta_y = torch.stack(torch.broadcast_tensors(*beta_y))
        plot_beta_y = stacked_beta_y.movedim(0, -1)

        if ax is None:
            ax = Figure().add_subplot(111)
        ax.set_title("Twiss Parameters")
        ax.set_xlabel("s (m)")
        ax.set_ylabel("beta (m)")
        ax.plot(plot_s_positions, plot_beta_x, label="beta_x", c="tab:red")
        ax.plot(plot_s_positions, plot_beta_y, label="beta_y", c="tab:green")
        ax.legend()
        return ax


# --------------------------------------------------------------------------
# Gradient-based tuning of the quadrupole triplet
# --------------------------------------------------------------------------
def make_incoming_beam() -> ParameterBeam:
    eps, beta, alpha = 2e-3, 5.0, -0.5
    gamma = (1 + alpha ** 2) / beta
    block = eps * torch.tensor([[beta, -alpha], [-alpha, gamma]])
    cov = torch.block_diag(block, block)
    return ParameterBeam(torch.zeros(4), cov)


segment = Segment([
    Drift(0.5, name="D1"),
    Quadrupole(0.2, 3.0, name="Q1"),
    Drift(0.4, name="D2"),
    Quadrupole(0.2, -3.0, name="Q2"),
    Drift(0.4, name="D3"),
    Quadrupole(0.2, 3.0, name="Q3"),
    Drift(0.8, name="D4"),
])
quads = [m for m in segment.elements if isinstance(m, Quadrupole)]
for quad in quads:
    quad.k1 = nn.Parameter(quad.k1.clone())

incoming = make_incoming_beam()
target_sigma = torch.tensor(0.05)
optimizer = torch.optim.Adam([q.k1 for q in quads], lr=0.1)
for step in range(80):
    optimizer.zero_grad()
    outgoing = segment.track(incoming)
    loss = (outgoing.sigma_x - target_sigma) ** 2 + (outgoing.sigma_y - target_sigma) ** 2
    loss.backward()
    optimizer.step()
    if step % 20 == 0:
        print(f"step {step:3d} loss {loss.item():.3e} k1 = {[round(q.k1.item(), 3) for q in quads]}")

print("total length", segment.total_length.item())
ax = segment.plot_twiss(incoming)
print("plotted", ax.legend())
