# expect: leaf_inplace
# source: https://github.com/dmlc/dgl/issues/4204
"""DimeNet-style directional message-passing model for small molecules.

Laid out like the DGL DimeNet example: a yaml-like model config, a BesselBasisLayer
with learnable frequencies and a polynomial envelope, an embedding block over atom
types, interaction blocks over edge messages, output blocks summing per-atom
contributions into a molecular property (energy), and a trainer with Adam, an
exponential LR decay, a warm-up, an EMA of the weights and a validation MAE.  Random
3-D "molecules" (atom types + coordinates + radius graph) stand in for QM9, CPU only.
"""
import copy
import math

import numpy as np
import torch
import torch.nn as nn

model_cnf = {
    "name": "dimenet",
    "model": {
        "emb_size": 32,
        "num_blocks": 2,
        "num_radial": 6,
        "cutoff": 5.0,
        "envelope_exponent": 5,
        "num_atom_types": 10,
        "output_init": "zeros",
    },
    "train": {
        "lr": 1e-3,
        "warmup_steps": 2,
        "decay_rate": 0.96,
        "decay_steps": 10,
        "ema_decay": 0.99,
        "epochs": 2,
        "batch_size": 4,
    },
}


def swish(x):
    return x * torch.sigmoid(x)


class Envelope(nn.Module):
    """Polynomial envelope that goes smoothly to zero at the cutoff."""

    def __init__(self, exponent):
        super().__init__()
        self.p = exponent + 1
        self.a = -(self.p + 1) * (self.p + 2) / 2
        self.b = self.p * (self.p + 2)
        self.c = -self.p * (self.p + 1) / 2

    def forward(self, x):
        x_p_0 = x.pow(self.p - 1)
        x_p_1 = x_p_0 * x
        x_p_2 = x_p_1 * x
        env_val = 1 / x + self.a * x_p_0 + self.b * x_p_1 + self.c * x_p_2
        return env_val


class BesselBasisLayer(nn.Module):
    def __init__(self, num_radial, cutoff, envelope_exponent=5):
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.frequencies = nn.Parameter(torch.Tensor(num_radial))
        self.reset_params()

    def reset_params(self):
        self.frequencies.copy_(torch.arange(1, self.frequencies.numel() + 1)).mul_(np.pi)  # raises

    def forward(self, dist):
        d_scaled = dist / self.cutoff
        d_cutoff = self.envelope(d_scaled)
        return d_cutoff.unsqueeze(-1) * torch.sin(self.frequencies * d_scaled.unsqueeze(-1))


class EmbeddingBlock(nn.Module):
    def __init__(self, emb_size, num_radial, num_atom_types):
        super().__init__()
        self.embedding = nn.Embedding(num_atom_types, emb_size)
        self.dense_rbf = nn.Linear(num_radial, emb_size)
        self.dense = nn.Linear(emb_size * 3, emb_size)
        self.reset_params()

    def reset_params(self):
        nn.init.uniform_(self.embedding.weight, a=-np.sqrt(3), b=np.sqrt(3))

    def forward(self, z, rbf, src, dst):
        h = self.embedding(z)
        rbf = swish(self.dense_rbf(rbf))
        m = torch.cat([h[src], h[dst], rbf], dim=-1)
        return swish(self.dense(m))


class ResidualLayer(nn.Module):
    def __init__(self, units):
        super().__init__()
        self.dense_1 = nn.Linear(units, units)
        self.dense_2 = nn.Linear(units, units)

    def forward(self, x):
        return x + swish(self.dense_2(swish(self.dense_1(x))))


class InteractionBlock(nn.Module):
    def __init__(self, emb_size, num_radial):
        super().__init__()
        self.dense_rbf = nn.Linear(num_radial, emb_size, bias=False)
        self.dense_ji = nn.Linear(emb_size, emb_size)
        self.dense_kj = nn.Linear(emb_size, emb_size)
        self.res_before = ResidualLayer(emb_size)
        self.final = nn.Linear(emb_size, emb_size)
        self.res_after = nn.Sequential(ResidualLayer(emb_size), ResidualLayer(emb_size))

    def forward(self, m, rbf, edge_to_node_dst, num_nodes):
        x_ji = swish(self.dense_ji(m))
        x_kj = swish(self.dense_kj(m)) * self.dense_rbf(rbf)
        # aggregate incoming messages at each destination atom and send them back along edges
        agg = m.new_zeros(num_nodes, m.shape[-1]).index_add(0, edge_to_node_dst, x_kj)
        x = x_ji + agg[edge_to_node_dst]
        x = self.res_before(x)
        x = swish(self.final(x)) + m
        return self.res_after(x)


class OutputBlock(nn.Module):
    def __init__(self, emb_size, num_radial, output_init):
        super().__init__()
        self.dense_rbf = nn.Linear(num_radial, emb_size, bias=False)
        self.dense_layers = nn.Sequential(nn.Linear(emb_size, emb_size), nn.SiLU(), nn.Linear(emb_size, emb_size), nn.SiLU())
        self.dense_final = nn.Linear(emb_size, 1, bias=False)
        if output_init == "zeros":
            nn.init.zeros_(self.dense_final.weight)

    def forward(self, m, rbf, dst, num_nodes):
        x = m * self.dense_rbf(rbf)
        t = x.new_zeros(num_nodes, x.shape[-1]).index_add(0, dst, x)
        return self.dense_final(self.dense_layers(t))


class DimeNet(nn.Module):
    def __init__(self, emb_size, num_blocks, num_radial, cutoff, envelope_exponent, num_atom_types, output_init):
        super().__init__()
        self.rbf_layer = BesselBasisLayer(num_radial=num_radial, cutoff=cutoff,
                                          envelope_exponent=envelope_exponent)
        self.emb_block = EmbeddingBlock(emb_size, num_radial, num_atom_types)
        self.output_blocks = nn.ModuleList(
            [OutputBlock(emb_size, num_radial, output_init) for _ in range(num_blocks + 1)])
        self.interaction_blocks = nn.ModuleList(
            [InteractionBlock(emb_size, num_radial) for _ in range(num_blocks)])

    def forward(self, z, pos, src, dst, batch):
        dist = (pos[src] - pos[dst]).norm(dim=-1)
        rbf = self.rbf_layer(dist)
        m = self.emb_block(z, rbf, src, dst)
        n = z.shape[0]
        atom_out = self.output_blocks[0](m, rbf, dst, n)
        for interaction, output in zip(self.interaction_blocks, self.output_blocks[1:]):
            m = interaction(m, rbf, dst, n)
            atom_out = atom_out + output(m, rbf, dst, n)
        num_mols = int(batch.max()) + 1
        return atom_out.new_zeros(num_mols, 1).index_add(0, batch, atom_out).squeeze(-1)


def random_molecule(rng, cutoff, max_atoms=9):
    n = rng.randint(4, max_atoms + 1)
    z = rng.randint(1, 10, size=n)
    pos = rng.randn(n, 3) * 1.2
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    src, dst = np.nonzero((d < cutoff) & (d > 0))
    energy = -0.5 * z.sum() + 0.1 * np.exp(-d[src, dst]).sum()
    return z, pos, src, dst, energy


def collate(mols):
    zs, poss, srcs, dsts, batch, ys, offset = [], [], [], [], [], [], 0
    for i, (z, pos, src, dst, y) in enumerate(mols):
        zs.append(torch.as_tensor(z)); poss.append(torch.as_tensor(pos, dtype=torch.float32))
        srcs.append(torch.as_tensor(src) + offset); dsts.append(torch.as_tensor(dst) + offset)
        batch.append(torch.full((len(z),), i, dtype=torch.long)); ys.append(y)
        offset += len(z)
    return (torch.cat(zs), torch.cat(poss), torch.cat(srcs), torch.cat(dsts), torch.cat(batch),
            torch.tensor(ys, dtype=torch.float32))


class EMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = copy.deepcopy(model.state_dict())

    @torch.no_grad()
    def update(self, model):
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k].mul_(self.decay).add_(v, alpha=1 - self.decay)


class Trainer:
    def __init__(self, cnf):
        self.cnf = cnf
        self.model = DimeNet(**cnf["model"])
        tcfg = cnf["train"]
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=tcfg["lr"], amsgrad=True)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: min(1.0, (s + 1) / tcfg["warmup_steps"]) * tcfg["decay_rate"] ** (s / tcfg["decay_steps"]))
        self.ema = EMA(self.model, tcfg["ema_decay"])
        self.loss_fn = nn.L1Loss()

    def train_step(self, batch):
        z, pos, src, dst, mol, y = batch
        self.optimizer.zero_grad()
        pred = self.model(z, pos, src, dst, mol)
        loss = self.loss_fn(pred, y)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
        self.optimizer.step()
        self.scheduler.step()
        self.ema.update(self.model)
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        maes = [(self.model(*b[:5]) - b[5]).abs().mean().item() for b in batches]
        self.model.train()
        return float(np.mean(maes))


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    cutoff = model_cnf["model"]["cutoff"]
    bs = model_cnf["train"]["batch_size"]
    train = [collate([random_molecule(rng, cutoff) for _ in range(bs)]) for _ in range(3)]
    valid = [collate([random_molecule(rng, cutoff) for _ in range(bs)]) for _ in range(2)]
    trainer = Trainer(model_cnf)
    for epoch in range(model_cnf["train"]["epochs"]):
        losses = [trainer.train_step(b) for b in train]
        print(f"epoch {epoch} train L1 {np.mean(losses):.4f} valid MAE {trainer.evaluate(valid):.4f}")


if __name__ == "__main__":
    main()
