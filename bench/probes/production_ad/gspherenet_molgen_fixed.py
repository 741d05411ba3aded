# expect: clean
# source: https://github.com/divelab/DIG/pull/222
"""Autoregressive 3D molecular geometry generation (G-SphereNet style).

The runner class mirrors dig.ggraph3D.method.G_SphereNet: get_model() builds the
SphGen model from a config dict (a SphereNet-like feature network with radial
Bessel basis, attention-free focus MLP and affine flow layers for atom type and
distance), train() fits it and generate() samples molecules atom by atom.  The
run script picks training or random generation from its arguments and then
evaluates simple validity statistics of the generated geometries.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PI = math.pi


class Envelope(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.p = exponent + 1
        self.a = -(self.p + 1) * (self.p + 2) / 2
        self.b = self.p * (self.p + 2)
        self.c = -self.p * (self.p + 1) / 2

    def forward(self, x):
        p, a, b, c = self.p, self.a, self.b, self.c
        x_pow_p0 = x.pow(p - 1)
        x_pow_p1 = x_pow_p0 * x
        x_pow_p2 = x_pow_p1 * x
        return 1. / x + a * x_pow_p0 + b * x_pow_p1 + c * x_pow_p2


class dist_emb(nn.Module):
    def __init__(self, num_radial, cutoff=5.0, envelope_exponent=5):
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.freq = nn.Parameter(torch.Tensor(num_radial))
        self.reset_parameters()

    def reset_parameters(self):
        self.freq.copy_(torch.arange(1, self.freq.numel() + 1, dtype=self.freq.dtype)).mul_(PI)

    def forward(self, dist):
        dist = dist.unsqueeze(-1) / self.cutoff
        return self.envelope(dist) * (self.freq * dist).sin()


class SphereNet(nn.Module):
    """Distance-only message passing over a fully connected molecular graph."""

    def __init__(self, cutoff, num_node_types, num_layers, hidden_channels, num_radial):
        super().__init__()
        self.emb = nn.Embedding(num_node_types, hidden_channels)
        self.dist_emb = dist_emb(num_radial, cutoff)
        self.lin_rbf = nn.ModuleList([nn.Linear(num_radial, hidden_channels) for _ in range(num_layers)])
        self.update = nn.ModuleList([nn.Linear(2 * hidden_channels, hidden_channels) for _ in range(num_layers)])

    def forward(self, z, pos):
        # z: (B, N), pos: (B, N, 3)
        h = self.emb(z)
        d = torch.cdist(pos, pos) + torch.eye(pos.size(1)).unsqueeze(0) * 1e3
        rbf = self.dist_emb(d.clamp(min=1e-2))
        for lin, upd in zip(self.lin_rbf, self.update):
            msg = (lin(rbf) * h.unsqueeze(1)).sum(2)
            h = h + F.silu(upd(torch.cat([h, msg], dim=-1)))
        return h


class ST_Net_Exp(nn.Module):
    def __init__(self, feat_dim, out_dim, hid_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(feat_dim, hid_dim), nn.Tanh(), nn.Linear(hid_dim, 2 * out_dim))

    def forward(self, feat):
        s, t = self.net(feat).chunk(2, dim=-1)
        return torch.tanh(s), t


def flow_forward(layers, x, feat):
    log_jacob = torch.zeros_like(x)
    for layer in layers:
        s, t = layer(feat)
        x = (x + t) * torch.exp(s)
        log_jacob = log_jacob + s
    return x, log_jacob


def flow_reverse(layers, z, feat):
    for layer in reversed(layers):
        s, t = layer(feat)
        z = z * torch.exp(-s) - t
    return z


class SphGen(nn.Module):
    def __init__(self, cutoff, num_node_types, num_layers, hidden_channels, num_radial,
                 num_flow_layers, deq_coeff=0.9):
        super().__init__()
        self.num_node_types = num_node_types
        self.feat_net = SphereNet(cutoff, num_node_types, num_layers, hidden_channels, num_radial)
        self.node_flow_layers = nn.ModuleList([ST_Net_Exp(hidden_channels, num_node_types, hidden_channels)
                                               for _ in range(num_flow_layers)])
        self.dist_flow_layers = nn.ModuleList([ST_Net_Exp(2 * hidden_channels, 1, hidden_channels)
                                               for _ in range(num_flow_layers)])
        self.focus_mlp = nn.Sequential(nn.Linear(hidden_channels, hidden_channels), nn.ReLU(),
                                       nn.Linear(hidden_channels, 1), nn.Sigmoid())
        self.deq_coeff = deq_coeff

    def forward(self, batch):
        node_feat = self.feat_net(batch['atom_type'], batch['position'])
        focus_score = self.focus_mlp(node_feat).squeeze(-1)
        focus_feat = node_feat[torch.arange(node_feat.size(0)), batch['focus']]
        x_z = F.one_hot(batch['new_atom_type'], self.num_node_types).float()
        x_z = x_z + self.deq_coeff * torch.rand_like(x_z)
        node_out = flow_forward(self.node_flow_layers, x_z, focus_feat)
        type_emb = self.feat_net.emb(batch['new_atom_type'])
        dist_out = flow_forward(self.dist_flow_layers, batch['new_dist'],
                                torch.cat([focus_feat, type_emb], dim=-1))
        return node_out, focus_score, dist_out

    def generate(self, type_to_atomic_number, num_gen=8, min_atoms=2, max_atoms=8, focus_th=0.5):
        with torch.no_grad():
            prior_node = torch.distributions.Normal(torch.zeros(self.num_node_types), torch.ones(self.num_node_types))
            prior_dist = torch.distributions.Normal(torch.zeros(1), torch.ones(1))
            z = torch.ones(num_gen, 1, dtype=torch.long)
            pos = torch.zeros(num_gen, 1, 3)
            out = {}
            for i in range(max_atoms):
                node_feat = self.feat_net(z, pos)
                focus_score = self.focus_mlp(node_feat).squeeze(-1)
                done = (focus_score < focus_th).sum(-1) == 0
                if i + 1 >= min_atoms and done.any():
                    out[i + 1] = {'_atomic_numbers': type_to_atomic_number[z[done].numpy()],
                                  '_positions': pos[done].numpy()}
                keep = ~done
                if keep.sum() == 0:
                    break
                z, pos, node_feat, focus_score = z[keep], pos[keep], node_feat[keep], focus_score[keep]
                focus = torch.multinomial((focus_score < focus_th).float() + 1e-6, 1).squeeze(-1)
                feat = node_feat[torch.arange(len(z)), focus]
                node_type = flow_reverse(self.node_flow_layers, prior_node.sample([len(z)]), feat).argmax(-1)
                dist_feat = torch.cat([feat, self.feat_net.emb(node_type)], dim=-1)
                dist = flow_reverse(self.dist_flow_layers, prior_dist.sample([len(z)]), dist_feat).abs() + 0.9
                direction = F.normalize(torch.randn(len(z), 3), dim=-1)
                new_pos = pos[torch.arange(len(z)), focus] + dist * direction
                z = torch.cat([z, node_type[:, None]], dim=1)
                pos = torch.cat([pos, new_pos[:, None]], dim=1)
            return out


class G_SphereNet:
    def __init__(self):
        self.model = None

    def get_model(self, model_conf_dict, checkpoint_path=None):
        self.model = SphGen(**model_conf_dict)
        if checkpoint_path is not None:
            self.model.load_state_dict(checkpoint_path)

    def train(self, loader, lr, wd, max_epochs, model_conf_dict, checkpoint_path=None):
        self.get_model(model_conf_dict, checkpoint_path)
        self.model.train()
        optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, self.model.parameters()),
                                     lr=lr, weight_decay=wd)
        ce_loss = nn.BCELoss()
        for epoch in range(1, max_epochs + 1):
            for batch in loader:
                optimizer.zero_grad()
                node_out, focus_score, dist_out = self.model(batch)
                ll_node = torch.mean(0.5 * node_out[0] ** 2 - node_out[1])
                ll_dist = torch.mean(0.5 * dist_out[0] ** 2 - dist_out[1])
                loss = ll_node + ll_dist + ce_loss(focus_score, batch['cannot_focus'])
                loss.backward()
                optimizer.step()
            print('Training | epoch {} | loss {:.4f}'.format(epoch, loss.item()))

    def generate(self, model_conf_dict, checkpoint_path, n_mols=16, chunk_size=8,
                 num_min_node=2, num_max_node=8, focus_th=0.5):
        self.get_model(model_conf_dict, checkpoint_path)
        self.model.eval()
        type_to_atomic_number = np.array([1, 6, 7, 8, 9])
        mol_dicts = {}
        num_remain = n_mols
        while num_remain > 0:
            mols = self.model.generate(type_to_atomic_number, min(chunk_size, num_remain),
                                       num_min_node, num_max_node, focus_th)
            for num_atom, d in mols.items():
                if num_atom not in mol_dicts:
                    mol_dicts[num_atom] = d
                else:
                    for k in d:
                        mol_dicts[num_atom][k] = np.concatenate([mol_dicts[num_atom][k], d[k]], axis=0)
            num_remain -= min(chunk_size, num_remain)
        return mol_dicts


class RandGenEvaluator:
    @staticmethod
    def eval_validity(mol_dicts):
        total, valid = 0, 0
        for num_atom, d in mol_dicts.items():
            pos = d['_positions']
            dists = np.linalg.norm(pos[:, :, None] - pos[:, None], axis=-1) + np.eye(num_atom) * 10
            valid += int((dists.min(axis=(1, 2)) > 0.5).sum())
            total += pos.shape[0]
        return {'validity': valid / max(total, 1), 'num_mols': total}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--train', action='store_true', default=False)
    parser.add_argument('--num_mols', type=int, default=16)
    args = parser.parse_args([])
    torch.manual_seed(0)
    np.random.seed(0)
    conf = {'model': {'cutoff': 5.0, 'num_node_types': 5, 'num_layers': 2, 'hidden_channels': 16,
                      'num_radial': 6, 'num_flow_layers': 2},
            'lr': 1e-3, 'weight_decay': 0.0, 'max_epochs': 1, 'chunk_size': 8,
            'num_min_node': 2, 'num_max_node': 8, 'focus_th': 0.5}
    runner = G_SphereNet()
    if args.train:
        g = torch.Generator().manual_seed(1)
        loader = [{'atom_type': torch.randint(0, 5, (4, 6), generator=g),
                   'position': torch.randn(4, 6, 3, generator=g),
                   'focus': torch.randint(0, 6, (4,), generator=g),
                   'new_atom_type': torch.randint(0, 5, (4,), generator=g),
                   'new_dist': 1.0 + torch.rand(4, 1, generator=g),
                   'cannot_focus': (torch.rand(4, 6, generator=g) > 0.5).float()} for _ in range(2)]
        runner.train(loader, lr=conf['lr'], wd=conf['weight_decay'], max_epochs=conf['max_epochs'],
                     model_conf_dict=conf['model'])
    else:
        with torch.no_grad():
            mol_dicts = runner.generate(model_conf_dict=conf['model'], checkpoint_path=None, n_mols=args.num_mols,
                                        chunk_size=conf['chunk_size'], num_min_node=conf['num_min_node'],
                                        num_max_node=conf['num_max_node'], focus_th=conf['focus_th'])
        print('Evaluating chemical validity...')
        print(RandGenEvaluator.eval_validity(mol_dicts))


if __name__ == '__main__':
    main()
