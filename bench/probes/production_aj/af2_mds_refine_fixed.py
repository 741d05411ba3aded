# expect: clean
# source: https://github.com/lucidrains/alphafold2/pull/37
"""End-to-end sequence-to-coordinates protein model (alphafold2-pytorch layout).

Trunk: residue embedding + MSA embedding, a few pair-representation transformer blocks,
a symmetrised distogram head.  Structure module: the distogram is turned into a central
distance estimate and confidence weights (`center_distogram_torch`), embedded into 3-D
with differentiable multidimensional scaling (`mds_torch` / `MDScaling`, Guttman
transform iterations) and refined in float64 by a small equivariant coordinate
updater.  Trained end to end on synthetic chains with a distogram cross-entropy plus a
distance-matrix loss; evaluation reports the distance RMSE.  CPU only.
"""
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# constants
NUM_AMINO_ACIDS = 21
DISTOGRAM_BUCKETS = 37
DISTANCE_THRESHOLDS = torch.linspace(2, 20, steps=DISTOGRAM_BUCKETS)

CONFIG = {
    'model': {'dim': 32, 'depth': 2, 'heads': 4, 'mds_iters': 5, 'refinement_iters': 2,
              'max_num_msas': 4},
    'data': {'seq_len': 12, 'num_msa': 3, 'batch_size': 2},
    'optim': {'lr': 3e-4, 'weight_decay': 1e-5, 'epochs': 2, 'steps_per_epoch': 3,
              'dist_loss_weight': 0.1},
    'seed': 0,
}


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def exists(val):
    return val is not None


def expand_dims_to(t, length):
    if length == 0:
        return t
    return t.reshape(*((1,) * length), *t.shape)


# --------------------------------------------------------------------------- data
def random_chain(n, rng):
    """A random-walk C-alpha trace with ~3.8 A steps."""
    steps = rng.normal(size=(n, 3))
    steps = 3.8 * steps / np.linalg.norm(steps, axis=-1, keepdims=True)
    return torch.tensor(np.cumsum(steps, axis=0), dtype=torch.float32)


def get_bucketed_distance_matrix(coords, mask, ignore_index=-100):
    distances = torch.cdist(coords, coords, p=2)
    boundaries = torch.linspace(2, 20, steps=DISTOGRAM_BUCKETS)
    discretized = torch.bucketize(distances, boundaries[:-1])
    discretized = discretized.masked_fill(~(mask[..., None] & mask[..., None, :]), ignore_index)
    return discretized


def make_batch(cfg, rng):
    b, n, m = cfg['batch_size'], cfg['seq_len'], cfg['num_msa']
    seq = torch.randint(0, NUM_AMINO_ACIDS, (b, n))
    msa = torch.where(torch.rand(b, m, n) < 0.8, seq[:, None], torch.randint(0, NUM_AMINO_ACIDS, (b, m, n)))
    coords = torch.stack([random_chain(n, rng) for _ in range(b)])
    mask = torch.ones(b, n, dtype=torch.bool)
    return seq, msa, coords, mask


# -------------------------------------------------------------------------- trunk
class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult * 2), GEGLU(), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class AxialAttention(nn.Module):
    """Row attention over the pair representation (b, n, n, d)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        b, n, _, d = x.shape
        rows = x.reshape(b * n, n, d)
        out, _ = self.attn(rows, rows, rows, need_weights=False)
        return out.reshape(b, n, n, d)


class Alphafold2(nn.Module):
    def __init__(self, dim, depth, heads, mds_iters, refinement_iters, max_num_msas):
        super().__init__()
        self.token_emb = nn.Embedding(NUM_AMINO_ACIDS, dim)
        self.msa_emb = nn.Embedding(NUM_AMINO_ACIDS, dim)
        self.msa_num_pos_emb = nn.Embedding(max_num_msas, dim)
        self.layers = nn.ModuleList([nn.ModuleList([PreNorm(dim, AxialAttention(dim, heads)),
                                                    PreNorm(dim, FeedForward(dim))]) for _ in range(depth)])
        self.to_distogram_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, DISTOGRAM_BUCKETS))
        self.mds_iters = mds_iters
        self.refinement_iters = refinement_iters
        self.structure_module_embeds = nn.Embedding(NUM_AMINO_ACIDS, 8).double()
        self.to_refined_coords_delta = nn.Linear(8 + 1, 1).double()

    def trunk(self, seq, msa):
        x = self.token_emb(seq)
        m = self.msa_emb(msa) + self.msa_num_pos_emb(torch.arange(msa.shape[1]))[None, :, None]
        x = x + m.mean(dim=1)
        pair = x[:, :, None] + x[:, None, :]
        for attn, ff in self.layers:
            pair = attn(pair) + pair
            pair = ff(pair) + pair
        pair = (pair + pair.transpose(1, 2)) * 0.5  # symmetrize
        return self.to_distogram_logits(pair)

    def refine(self, seq, coords):
        x = self.structure_module_embeds(seq)
        coords = coords.double()
        for _ in range(self.refinement_iters):
            rel = coords[:, :, None] - coords[:, None, :]
            dist = rel.norm(dim=-1, keepdim=True)
            feats = torch.cat([x[:, :, None].expand(-1, -1, x.shape[1], -1), dist], dim=-1)
            w = torch.tanh(self.to_refined_coords_delta(feats))
            coords = coords + (w * rel).mean(dim=2)
        return coords.float()

    def forward(self, seq, msa, mask=None):
        distogram_logits = self.trunk(seq, msa)
        coords = []
        for distogram in distogram_logits.softmax(dim=-1):
            distances, weights = center_distogram_torch(distogram)
            coords_3d, _ = MDScaling(distances, weights=weights, iters=self.mds_iters, fix_mirror=0)
            coords.append(coords_3d.transpose(-1, -2))
        coords = torch.cat(coords, dim=0)
        return distogram_logits, self.refine(seq, coords)


# ---------------------------------------------------------------- structure utils
def center_distogram_torch(distogram, bins=DISTANCE_THRESHOLDS, min_t=1., center="mean", wide="std"):
    """Central estimate (batch, N, N) and confidence weights from a distogram (N, N, B)."""
    shape, device = distogram.shape, distogram.device
    n_bins = (bins - 0.5 * (bins[2] - bins[1])).to(device)
    n_bins[0] = 1.5
    n_bins[-1] = 1.33 * bins[-1]
    central = (distogram * n_bins).sum(dim=-1)
    mask = (central <= bins[-2].item()).float()
    diag_mask = torch.eye(shape[-2], device=device).bool()
    central = expand_dims_to(central, 3 - len(central.shape))
    central.masked_fill_(diag_mask[None, ...], 0.)
    dispersion = (distogram * (n_bins - central.unsqueeze(-1)) ** 2).sum(dim=-1).sqrt()
    weights = mask / (1 + dispersion)
    weights[weights != weights] = 0.
    return central, weights


def mds_torch(pre_dist_mat, weights=None, iters=10, tol=1e-5, verbose=0):
    """Distance matrix -> 3-D coords via Guttman transform updates (sklearn SMACOF-like)."""
    device = pre_dist_mat.device
    if weights is None:
        weights = torch.ones_like(pre_dist_mat)
    pre_dist_mat = expand_dims_to(pre_dist_mat, length=(3 - len(pre_dist_mat.shape)))
    batch, N, _ = pre_dist_mat.shape
    his = []
    best_stress = float("Inf") * torch.ones(batch, device=device)
    best_3d_coords = 2 * torch.rand(batch, N, 3, device=device) - 1
    for i in range(iters):
        # compute distance matrix of coords and stress
        dist_mat = torch.cdist(best_3d_coords, best_3d_coords, p=2).clone()
        stress = (weights * (dist_mat - pre_dist_mat) ** 2).sum(dim=(-1, -2)) * 0.5
        # perturb - update X using the Guttman transform - sklearn-like
        mask = dist_mat == 0
        dist_mat.masked_fill_(mask, 1e-7)
        ratio = weights * (pre_dist_mat / dist_mat)
        B = -ratio
        old_B = B[:, np.arange(N), np.arange(N)].clone()
        B[:, np.arange(N), np.arange(N)] = old_B + ratio.sum(dim=-1)
        coords = (1. / N * torch.matmul(B, best_3d_coords))
        dis = torch.norm(coords, dim=(-1, -2))
        if verbose >= 2:
            print('it: %d, stress %s' % (i, stress))
        if (best_stress - stress / dis).mean() <= tol:
            break
        best_3d_coords = coords
        best_stress = stress / dis
        his.append(best_stress)
    return torch.transpose(best_3d_coords, -1, -2), torch.cat(his)


def MDScaling(pre_dist_mat, weights=None, iters=10, tol=1e-5, fix_mirror=0, verbose=0):
    coords, his = mds_torch(pre_dist_mat, weights=weights, iters=iters, tol=tol, verbose=verbose)
    if fix_mirror:
        # flip chirality if most consecutive dihedrals are negative (not used here)
        coords = coords * torch.tensor([1., 1., -1.])[:, None]
    return coords, his


# ------------------------------------------------------------------------ trainer
class Trainer:
    def __init__(self, config):
        self.cfg = config
        self.rng = np.random.default_rng(config['seed'])
        self.model = Alphafold2(**config['model'])
        oc = config['optim']
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=oc['lr'], weight_decay=oc['weight_decay'])
        total = oc['epochs'] * oc['steps_per_epoch']
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / 2) * 0.5 * (1 + math.cos(math.pi * s / total)))

    def compute_loss(self, distogram_logits, pred_coords, coords, mask):
        labels = get_bucketed_distance_matrix(coords, mask)
        ce = F.cross_entropy(distogram_logits.permute(0, 3, 1, 2), labels, ignore_index=-100)
        pred_d = torch.cdist(pred_coords, pred_coords)
        true_d = torch.cdist(coords, coords)
        dist_loss = F.smooth_l1_loss(pred_d, true_d)
        return ce + self.cfg['optim']['dist_loss_weight'] * dist_loss, dist_loss

    def train_step(self, batch):
        seq, msa, coords, mask = batch
        self.model.train()
        distogram_logits, pred_coords = self.model(seq, msa, mask=mask)
        loss, _ = self.compute_loss(distogram_logits, pred_coords, coords, mask)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        seq, msa, coords, mask = make_batch(self.cfg['data'], self.rng)
        _, pred = self.model(seq, msa, mask=mask)
        return (torch.cdist(pred, pred) - torch.cdist(coords, coords)).pow(2).mean().sqrt().item()

    def fit(self):
        oc = self.cfg['optim']
        for epoch in range(oc['epochs']):
            losses = [self.train_step(make_batch(self.cfg['data'], self.rng)) for _ in range(oc['steps_per_epoch'])]
            print(f"epoch {epoch}: loss {np.mean(losses):.4f} distance rmse {self.evaluate():.3f}")


def main():
    set_seed(CONFIG['seed'])
    Trainer(CONFIG).fit()


if __name__ == '__main__':
    main()
