# expect: clean
# source: https://github.com/openmm/openmm-torch/issues/119
"""A learned dihedral bias applied through a TorchForce-style plugin.

The simulation layer mirrors OpenMM's Python API closely enough to run a
minimisation and a few Langevin steps: a System holds forces, a Context holds
positions, and the TorchForce kernel evaluates a PyTorch module on the
positions and differentiates its return value to obtain forces (what the
openmm-torch CPU kernel does with ``energyTensor.backward()``).
"""
import math
from dataclasses import dataclass, field
from typing import List

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)


# --------------------------------------------------------------------- openmm-like layer
class HarmonicBondForce:
    def __init__(self):
        self.bonds = []

    def addBond(self, i, j, length, k):
        self.bonds.append((i, j, length, k))

    def compute(self, positions: np.ndarray):
        forces = np.zeros_like(positions)
        energy = 0.0
        for i, j, r0, k in self.bonds:
            d = positions[j] - positions[i]
            r = np.linalg.norm(d)
            energy += 0.5 * k * (r - r0) ** 2
            f = -k * (r - r0) * d / r
            forces[j] += f
            forces[i] -= f
        return energy, forces


class TorchForce:
    """Wraps a torch.nn.Module that maps positions (nm) to a potential energy (kJ/mol)."""

    def __init__(self, module: nn.Module):
        self.module = module

    def compute(self, positions: np.ndarray):
        pos = torch.tensor(positions, dtype=torch.float32, requires_grad=True)
        energy = self.module(pos)
        energy.backward()
        forces = -pos.grad.numpy().astype(np.float64)
        return float(energy.detach()), forces


@dataclass
class System:
    masses: List[float] = field(default_factory=list)
    forces: list = field(default_factory=list)

    def addParticle(self, mass):
        self.masses.append(mass)
        return len(self.masses) - 1

    def addForce(self, force):
        self.forces.append(force)
        return len(self.forces) - 1


class Context:
    def __init__(self, system: System):
        self.system = system
        self.positions = None
        self.velocities = None

    def setPositions(self, positions):
        self.positions = np.array(positions, dtype=np.float64)
        self.velocities = np.zeros_like(self.positions)

    def getState(self):
        energy, forces = 0.0, np.zeros_like(self.positions)
        for force in self.system.forces:
            e, f = force.compute(self.positions)
            energy += e
            forces += f
        return energy, forces


class LocalEnergyMinimizer:
    @staticmethod
    def minimize(context: Context, tolerance=10.0, maxIterations=200, step=1e-3):
        energy, forces = context.getState()
        for it in range(maxIterations):
            if np.abs(forces).max() < tolerance:
                break
            trial = context.positions + step * forces / max(np.abs(forces).max(), 1.0)
            old = context.positions
            context.positions = trial
            new_energy, new_forces = context.getState()
            if new_energy < energy:
                energy, forces = new_energy, new_forces
                step *= 1.2
            else:
                context.positions = old
                step *= 0.5
        return energy


class LangevinIntegrator:
    def __init__(self, temperature, friction, dt):
        self.kT = 0.008314 * temperature
        self.friction = friction
        self.dt = dt

    def step(self, context: Context, masses: np.ndarray):
        _, forces = context.getState()
        v = context.velocities + self.dt * forces / masses[:, None]
        c = math.exp(-self.friction * self.dt)
        v = c * v + np.sqrt((1 - c * c) * self.kT / masses[:, None]) * np.random.randn(*v.shape)
        context.velocities = v
        context.positions = context.positions + self.dt * v


class Simulation:
    def __init__(self, system, integrator):
        self.system = system
        self.integrator = integrator
        self.context = Context(system)

    def minimizeEnergy(self, tolerance=10.0, maxIterations=200):
        return LocalEnergyMinimizer.minimize(self.context, tolerance, maxIterations)

    def step(self, n):
        masses = np.array(self.system.masses)
        for _ in range(n):
            self.integrator.step(self.context, masses)


# --------------------------------------------------------------------- learned bias on dihedrals
def dihedral(p0, p1, p2, p3):
    b0, b1, b2 = p0 - p1, p2 - p1, p3 - p2
    b1n = b1 / b1.norm(dim=-1, keepdim=True)
    v = b0 - (b0 * b1n).sum(-1, keepdim=True) * b1n
    w = b2 - (b2 * b1n).sum(-1, keepdim=True) * b1n
    x = (v * w).sum(-1)
    y = (torch.cross(b1n, v, dim=-1) * w).sum(-1)
    return torch.atan2(y, x)


class DihedralBias(nn.Module):
    """Converts coordinates into phi/psi dihedrals and feeds them to a small network."""

    def __init__(self, quads, hidden=16):
        super().__init__()
        self.register_buffer("quads", torch.tensor(quads, dtype=torch.long))
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, positions):
        p = positions[self.quads]  # (n_dihedrals, 4, 3)
        angles = dihedral(p[:, 0], p[:, 1], p[:, 2], p[:, 3])
        feats = torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)
        # TorchForce interprets the return value as the energy: it must be a single number
        return self.net(feats).squeeze(-1).sum()


n_atoms = 12
positions = np.cumsum(0.15 * np.random.randn(n_atoms, 3) + np.array([0.12, 0.0, 0.0]), axis=0)
system = System()
for _ in range(n_atoms):
    system.addParticle(12.0)
bonds = HarmonicBondForce()
for i in range(n_atoms - 1):
    bonds.addBond(i, i + 1, 0.15, 2.0e4)
system.addForce(bonds)

backbone_quads = [(i, i + 1, i + 2, i + 3) for i in range(0, n_atoms - 3, 2)]
bias = DihedralBias(backbone_quads)
system.addForce(TorchForce(bias))

simulation = Simulation(system, LangevinIntegrator(300.0, 1.0, 0.002))
simulation.context.setPositions(positions)
energy = simulation.minimizeEnergy()
print("minimised energy", round(energy, 3))
simulation.step(20)
print("final energy", round(simulation.context.getState()[0], 3))
