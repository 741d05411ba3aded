# expect: clean
# source: https://github.com/jonathanking/sidechainnet/issues/48
"""Protein torsion-angle prediction with structure reconstruction, in the
style of SidechainNet.

A bidirectional GRU predicts per-residue angles (as sin/cos pairs) from the
amino-acid sequence. At validation time predicted angles are turned into
atomic coordinates by a StructureBuilder (NeRF over backbone + CB atoms),
scored by distance-matrix RMSD against the reference structure, and exported
as PDB text by a callback.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ProteinVocabulary:
    def __init__(self, letters="ACDEFGHIKLMNPQRSTVWY"):
        self._char2int = {c: i for i, c in enumerate(letters)}
        self._int2char = {i: c for i, c in enumerate(letters)}

    def int2char(self, i):
        return self._int2char[int(i)]

    def ints2str(self, ints):
        return "".join(self._int2char[int(i)] for i in ints)

    def __len__(self):
        return len(self._char2int)


VOCAB = ProteinVocabulary()
BB_BUILD_INFO = {"BONDLENS": {"n-ca": 1.442, "ca-c": 1.498, "c-n": 1.379, "c-o": 1.229},
                 "BONDANGS": {"ca-c-o": 2.0944}}
SC_BUILD_INFO = {aa: {"bonds-vals": [1.53], "angles-vals": [1.9391], "torsion-names": ["C-N-CA-CB"],
                      "torsion-vals": ["p" if aa in "FWY" else -2.1428]} for aa in VOCAB._char2int if aa != "G"}
SC_BUILD_INFO["G"] = {"bonds-vals": [], "angles-vals": [], "torsion-names": [], "torsion-vals": []}
NUM_ANGLES, SC_ANGLES_START_POS, NUM_COORDS_PER_RES = 7, 6, 5


def nerf(a, b, c, l, theta, chi, l_bc=None, nerf_method="standard"):
    """Place point d such that |cd| = l, angle bcd = theta and dihedral abcd = chi."""
    W_hat = F.normalize(b - a, dim=0)
    x_hat = F.normalize(c - b, dim=0)
    n_unit = F.normalize(torch.linalg.cross(W_hat, x_hat), dim=0)
    z_hat = F.normalize(torch.linalg.cross(n_unit, x_hat), dim=0)
    M = torch.stack([x_hat, z_hat, n_unit], dim=1)
    d = torch.stack([torch.squeeze(-l * torch.cos(theta)),
                     torch.squeeze(l * torch.sin(theta) * torch.cos(chi)),
                     torch.squeeze(l * torch.sin(theta) * torch.sin(chi))]).unsqueeze(1).to(torch.float32)
    return (c + torch.mm(M, d).squeeze()).squeeze()


def _get_residue_build_iter(res, build_dictionary):
    r = build_dictionary[VOCAB.int2char(res)]
    bond_vals = [torch.tensor(b, dtype=torch.float32) for b in r["bonds-vals"]]
    pbond_vals = [torch.tensor(BB_BUILD_INFO["BONDLENS"]["n-ca"])] + bond_vals[:-1]
    angle_vals = [torch.tensor(a, dtype=torch.float32) for a in r["angles-vals"]]
    torsion_vals = [torch.tensor(t, dtype=torch.float32) if t not in ["p", "i"] else t for t in r["torsion-vals"]]
    return iter(zip(pbond_vals, bond_vals, angle_vals, torsion_vals, [t.split("-") for t in r["torsion-names"]]))


class ResidueBuilder:
    def __init__(self, name, angles, prev_res, next_res, is_last_res=False, device=torch.device("cpu")):
        if isinstance(angles, np.ndarray):
            angles = torch.tensor(angles, dtype=torch.float32)
        self.name, self.ang = name, angles.squeeze()
        self.prev_res, self.next_res, self.is_last_res, self.device = prev_res, next_res, is_last_res, device
        self.bb, self.sc, self.coords = [], [], []
        self.coordinate_padding = torch.zeros(3, requires_grad=True)

    @property
    def AA(self):
        return VOCAB.int2char(self.name)

    def build(self):
        self.build_bb()
        self.build_sc()
        return self._stack_coords()

    def build_bb(self):
        if self.prev_res is None:
            self.bb = self._init_bb()
            return self.bb
        L = BB_BUILD_INFO["BONDLENS"]
        pts = [self.prev_res.bb[0], self.prev_res.bb[1], self.prev_res.bb[2]]
        specs = [(self.prev_res.ang[4], L["c-n"], L["ca-c"], self.prev_res.ang[1]),   # N
                 (self.prev_res.ang[5], L["n-ca"], L["c-n"], self.prev_res.ang[2]),   # CA
                 (self.ang[3], L["ca-c"], L["n-ca"], self.ang[0])]                     # C
        for t, b, pb, dihedral in specs:
            pts.append(nerf(pts[-3], pts[-2], pts[-1], b, t, dihedral, l_bc=pb))
        # the angle for placing oxygen is opposite to psi of current res
        o_dihedral = self.ang[1] if self.is_last_res else self.ang[1] - np.pi
        pts.append(nerf(pts[-3], pts[-2], pts[-1], L["c-o"], torch.tensor(BB_BUILD_INFO["BONDANGS"]["ca-c-o"]),
                        o_dihedral, l_bc=L["ca-c"]))
        self.bb = pts[3:]
        return self.bb

    def _init_bb(self):
        """Initialize the first 3 points of the protein's backbone (plane z = .001)."""
        n = torch.tensor([0, 0, 0.001], device=self.device, requires_grad=True)
        ca = n + torch.tensor([BB_BUILD_INFO["BONDLENS"]["n-ca"], 0, 0], device=self.device, requires_grad=True)
        cx = torch.cos(np.pi - self.ang[3]) * BB_BUILD_INFO["BONDLENS"]["ca-c"]
        cy = torch.sin(np.pi - self.ang[3]) * BB_BUILD_INFO["BONDLENS"]["ca-c"]
        c = ca + torch.tensor([cx, cy, 0], device=self.device, dtype=torch.float32, requires_grad=True)
        o = nerf(n, ca, c, torch.tensor(BB_BUILD_INFO["BONDLENS"]["c-o"]),
                 torch.tensor(BB_BUILD_INFO["BONDANGS"]["ca-c-o"]), self.ang[1] - np.pi,
                 l_bc=torch.tensor(BB_BUILD_INFO["BONDLENS"]["ca-c"]))
        return [n, ca, c, o]

    def build_sc(self):
        assert len(self.bb) > 0, "Backbone must be built first."
        self.atom_names = ["N", "CA", "C", "O"]
        self.pts = {"N": self.bb[0], "CA": self.bb[1], "C": self.bb[2]}
        if self.next_res:
            self.pts["N+"] = self.next_res.bb[0]
        else:
            self.pts["C-"] = self.prev_res.bb[2]
        for i, (pbond_len, bond_len, angle, torsion, atom_names) in enumerate(
                _get_residue_build_iter(self.name, SC_BUILD_INFO)):
            if self.next_res and i == 0:
                a, b, c = self.pts["N+"], self.pts["C"], self.pts["CA"]
            elif i == 0:
                a, b, c = self.pts["C-"], self.pts["N"], self.pts["CA"]
            else:
                a, b, c = (self.pts[an] for an in atom_names[:-1])
            if type(torsion) is str and torsion == "p":
                torsion = self.ang[SC_ANGLES_START_POS + i]
            new_pt = nerf(a, b, c, bond_len, angle, torsion, l_bc=pbond_len)
            self.pts[atom_names[-1]] = new_pt
            self.sc.append(new_pt)
            self.atom_names.append(atom_names[-1])
        return self.sc

    def _stack_coords(self):
        self.coords = self.bb + self.sc + (NUM_COORDS_PER_RES - len(self.bb) - len(self.sc)) * [self.coordinate_padding]
        return self.coords


class StructureBuilder:
    """Reconstruct a protein's structure given its sequence and angles or coordinates."""

    def __init__(self, seq, ang=None, crd=None):
        if (ang is None) == (crd is None):
            raise ValueError("You must provide exactly one of either coordinates (crd) or angles (ang).")
        self.ang, self.coords = ang, crd
        self.seq_as_str = seq if isinstance(seq, str) else VOCAB.ints2str(seq)
        self.seq_as_ints = np.asarray([VOCAB._char2int[s] for s in self.seq_as_str])
        data = self.coords if self.coords is not None else self.ang
        self.data_type = "torch" if isinstance(data, torch.Tensor) else "numpy"
        if self.ang is not None and self.ang.shape[-1] != NUM_ANGLES:
            raise ValueError(f"Angle matrix dimensions must match (L x {NUM_ANGLES}).")
        self.pdb_lines = None

    def _iter_resname_angs(self, start=0):
        yield from zip(self.seq_as_ints[start:], self.ang[start:])

    def _build_first_two_residues(self):
        it = self._iter_resname_angs()
        (first_resname, first_ang), (second_resname, second_ang) = next(it), next(it)
        first_res = ResidueBuilder(first_resname, first_ang, prev_res=None, next_res=None)
        second_res = ResidueBuilder(second_resname, second_ang, prev_res=first_res, next_res=None)
        # After building both backbones use the second residue's N to build the first's CB
        first_res.build_bb()
        second_res.build()
        first_res.next_res = second_res
        first_res.build_sc()
        return first_res, second_res

    def build(self):
        if self.ang is None:
            return self.coords
        first, second = self._build_first_two_residues()
        self.coords = first._stack_coords() + second._stack_coords()
        prev_res = second
        for i, (resname, ang) in enumerate(self._iter_resname_angs(start=2)):
            res = ResidueBuilder(resname, ang, prev_res=prev_res, next_res=None,
                                 is_last_res=i + 2 == len(self.seq_as_str) - 1)
            self.coords += res.build()
            prev_res = res
        if self.data_type == "numpy" and torch.is_tensor(self.coords[0]):
            self.coords = torch.stack(self.coords)
            self.coords = self.coords.detach().numpy()
        elif self.data_type == "numpy" and isinstance(self.coords[0], np.ndarray):
            self.coords = np.stack(self.coords)
        else:
            self.coords = torch.stack(self.coords)
            self.data_type = "torch"
        return self.coords

    def to_pdbstr(self, title="pred"):
        if self.coords is None or isinstance(self.coords, list):
            self.build()
        crd = self.coords if self.data_type == "numpy" else self.coords.detach().numpy()
        lines = [f"REMARK  {title}"]
        names = ["N", "CA", "C", "O", "CB"]
        for i, xyz in enumerate(crd):
            r, a = divmod(i, NUM_COORDS_PER_RES)
            if np.abs(xyz).sum() == 0:
                continue
            lines.append(f"ATOM  {i + 1:5d}  {names[a]:<3s} {self.seq_as_str[r]:>3s} A{r + 1:4d}    "
                         f"{xyz[0]:8.3f}{xyz[1]:8.3f}{xyz[2]:8.3f}  1.00  0.00")
        return "\n".join(lines + ["END"])


def drmsd(a, b):
    da, db = np.linalg.norm(a[:, None] - a[None], axis=-1), np.linalg.norm(b[:, None] - b[None], axis=-1)
    return float(np.sqrt(((da - db) ** 2)[np.triu_indices(len(a), 1)].mean()))


class AnglePredictor(nn.Module):
    def __init__(self, d_embedding=32, d_hidden=64):
        super().__init__()
        self.embedding = nn.Embedding(len(VOCAB), d_embedding)
        self.rnn = nn.GRU(d_embedding, d_hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * d_hidden, NUM_ANGLES * 2)

    def forward(self, seq):
        h, _ = self.rnn(self.embedding(seq))
        return torch.tanh(self.head(h)).view(*seq.shape, NUM_ANGLES, 2)

    @staticmethod
    def to_angles(sincos):
        return torch.atan2(sincos[..., 0], sincos[..., 1])


def make_protein(rng, length):
    seq = rng.integers(0, len(VOCAB), length)
    ang = np.zeros((length, NUM_ANGLES), np.float32)
    helix = rng.random() < 0.5
    ang[:, 0] = np.deg2rad(-57 if helix else -120) + rng.normal(0, 0.15, length)
    ang[:, 1] = np.deg2rad(-47 if helix else 130) + rng.normal(0, 0.15, length)
    ang[:, 2] = np.pi
    ang[:, 3:6] = [1.94, 2.03, 2.12]
    ang[:, 6] = np.where(np.isin(seq, [4, 18, 19]), rng.uniform(-np.pi, np.pi, length), 0)
    return seq, ang


class Trainer:
    def __init__(self, model, args, callbacks=()):
        self.model, self.args = model, args
        self.optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=args.epochs)
        self.callbacks = list(callbacks)

    def train_step(self, seq, ang):
        pred = self.model(seq)
        target = torch.stack([torch.sin(ang), torch.cos(ang)], dim=-1)
        loss = F.mse_loss(pred, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def evaluate(self, val_set):
        self.model.eval()
        scores, pdbs = [], []
        for seq, ang in val_set:
            with torch.no_grad():
                pred_ang = AnglePredictor.to_angles(self.model(torch.as_tensor(seq)[None]))[0].numpy()
            pred_sb, true_sb = StructureBuilder(seq, ang=pred_ang), StructureBuilder(seq, ang=ang)
            pred_crd, true_crd = pred_sb.build(), true_sb.build()
            ca = slice(1, None, NUM_COORDS_PER_RES)
            scores.append(drmsd(pred_crd[ca], true_crd[ca]))
            pdbs.append(pred_sb.to_pdbstr())
        self.model.train()
        return {"drmsd_ca": float(np.mean(scores)), "pdb": pdbs[0]}

    def fit(self, train_set, val_set):
        for epoch in range(self.args.epochs):
            losses = [self.train_step(torch.as_tensor(s)[None], torch.as_tensor(a)[None]) for s, a in train_set]
            self.scheduler.step()
            logs = {"epoch": epoch, "loss": float(np.mean(losses)), **self.evaluate(val_set)}
            for cb in self.callbacks:
                cb(logs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=11)
    args = p.parse_args([])
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_set = [make_protein(rng, int(rng.integers(20, 40))) for _ in range(24)]
    val_set = [make_protein(rng, 30) for _ in range(3)]
    exported = []
    callbacks = [lambda logs: print(f"epoch {logs['epoch']} loss {logs['loss']:.4f} dRMSD(CA) {logs['drmsd_ca']:.2f}"),
                 lambda logs: exported.append(logs["pdb"])]
    Trainer(AnglePredictor(), args, callbacks).fit(train_set, val_set)
    print(exported[-1].splitlines()[1])


if __name__ == "__main__":
    main()
