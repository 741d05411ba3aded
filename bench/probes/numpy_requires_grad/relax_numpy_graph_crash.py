# expect: numpy_requires_grad
# source: https://github.com/TorchSim/torch-sim/issues/469
import itertools
import logging
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s: %(message)s")
log = logging.getLogger("relax")

CONFIG = {
    "lattice_constant": 5.26,
    "repeats": 2,
    "rattle": 0.08,
    "cutoff": 8.0,
    "lj": {18: {"epsilon": 0.0104, "sigma": 3.40}},
    "optimizer": {"lr": 0.5, "max_steps": 15, "fmax": 1e-3, "history_size": 10},
    "seed": 0,
    "dtype": torch.float64,
}


@dataclass
class SimState:
    positions: torch.Tensor       # (n_atoms, 3)
    cell: torch.Tensor            # (3, 3), row vectors
    atomic_numbers: torch.Tensor  # (n_atoms,)
    pbc: torch.Tensor             # (3,) bool

    @property
    def n_atoms(self) -> int:
        return self.positions.shape[0]


def fcc_argon(cfg) -> SimState:
    a, n = cfg["lattice_constant"], cfg["repeats"]
    basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    cells = np.array(list(itertools.product(range(n), repeat=3)))
    frac = (cells[:, None, :] + basis[None]).reshape(-1, 3)
    rng = np.random.default_rng(cfg["seed"])
    pos = frac * a + cfg["rattle"] * rng.normal(size=frac.shape)
    dt = cfg["dtype"]
    return SimState(positions=torch.tensor(pos, dtype=dt),
                    cell=torch.eye(3, dtype=dt) * a * n,
                    atomic_numbers=torch.full((len(pos),), 18, dtype=torch.long),
                    pbc=torch.tensor([True, True, True]))


def neighbor_list(positions: np.ndarray, cell: np.ndarray, pbc: np.ndarray, cutoff: float):
    """Brute-force periodic neighbour list over the 27 nearest images."""
    ranges = [range(-1, 2) if p else range(0, 1) for p in pbc]
    shifts = np.array(list(itertools.product(*ranges)), dtype=np.float64)
    idx_i, idx_j, idx_s = [], [], []
    for s_idx, shift in enumerate(shifts):
        disp = positions[None, :, :] + shift @ cell - positions[:, None, :]
        dist = np.linalg.norm(disp, axis=-1)
        mask = (dist < cutoff) & (dist > 1e-8)
        i, j = np.nonzero(mask)
        idx_i.append(i)
        idx_j.append(j)
        idx_s.append(np.full(len(i), s_idx))
    return np.concatenate(idx_i), np.concatenate(idx_j), shifts[np.concatenate(idx_s)]


class PairPotentialModel(nn.Module):
    """Wraps a numpy graph builder + torch energy head, like an external-MLIP adapter."""

    def __init__(self, cfg):
        super().__init__()
        self.cutoff = cfg["cutoff"]
        self.params = cfg["lj"]
        self.dtype = cfg["dtype"]

    def build_graph(self, state: SimState):
        positions = state.positions.to("cpu").numpy()  # raises
        cell = state.cell.to("cpu").numpy()
        pbc = state.pbc.to("cpu").numpy()
        atomic_numbers = state.atomic_numbers.to("cpu").numpy()
        i, j, shifts = neighbor_list(positions, cell, pbc, self.cutoff)
        eps = np.array([self.params[int(z)]["epsilon"] for z in atomic_numbers])
        sig = np.array([self.params[int(z)]["sigma"] for z in atomic_numbers])
        return {
            "i": torch.from_numpy(i), "j": torch.from_numpy(j),
            "shifts": torch.from_numpy(shifts).to(self.dtype),
            "eps": torch.from_numpy(np.sqrt(eps[i] * eps[j])),
            "sig": torch.from_numpy(0.5 * (sig[i] + sig[j])),
        }

    def forward(self, state: SimState):
        g = self.build_graph(state)
        pos = state.positions
        if not pos.requires_grad:
            pos = pos.detach().requires_grad_(True)
        disp = pos[g["j"]] + g["shifts"] @ state.cell - pos[g["i"]]
        r = disp.norm(dim=1)
        sr6 = (g["sig"] / r) ** 6
        energy = 0.5 * (4 * g["eps"] * (sr6 ** 2 - sr6)).sum()
        forces = -torch.autograd.grad(energy, pos, retain_graph=True)[0]
        return {"energy": energy, "forces": forces}


def optimize(model: PairPotentialModel, state: SimState, opt_cfg) -> SimState:
    state = replace(state, positions=state.positions.clone().requires_grad_(True))
    optimizer = torch.optim.LBFGS([state.positions], lr=opt_cfg["lr"],
                                  history_size=opt_cfg["history_size"], max_iter=1)
    last = {}

    def closure():
        optimizer.zero_grad()
        out = model(state)
        out["energy"].backward()
        last.update(out)
        return out["energy"]

    for step in range(opt_cfg["max_steps"]):
        optimizer.step(closure)
        fmax = last["forces"].norm(dim=1).max().item()
        log.info("step %2d  E = %.6f eV  fmax = %.5f eV/A", step, last["energy"].item(), fmax)
        if fmax < opt_cfg["fmax"]:
            break
    return replace(state, positions=state.positions.detach())


def main():
    torch.manual_seed(CONFIG["seed"])
    state = fcc_argon(CONFIG)
    model = PairPotentialModel(CONFIG)

    out = model(state)
    log.info("single point: %d atoms, E = %.6f eV, fmax = %.5f", state.n_atoms,
             out["energy"].item(), out["forces"].norm(dim=1).max().item())

    relaxed = optimize(model, state, CONFIG["optimizer"])
    shift = (relaxed.positions - state.positions).norm(dim=1)
    log.info("relaxed: mean displacement %.4f A, max %.4f A", shift.mean().item(), shift.max().item())


if __name__ == "__main__":
    main()
