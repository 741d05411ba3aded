# expect: clean
# source: https://github.com/kfzyqin/Implementation-MolGAN-PyTorch/issues/1
"""MolGAN-style generative model for small molecular graphs (PyTorch port layout).

A generator maps noise to bond-adjacency and atom-type logits; a relational
graph-conv discriminator (WGAN-GP) and a reward network V of the same shape
are trained alongside it.  V regresses a chemistry reward computed on the
hard-decoded molecules; the generator mixes the WGAN loss with the RL loss
from V.  The "dataset" is a seeded set of random valence-respecting graphs.
"""
import time
import datetime
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_VALENCE = np.array([0, 4, 3, 2, 1], dtype=np.float32)   # pad, C, N, O, F
BOND_ORDER = np.array([0, 1, 2, 3], dtype=np.float32)       # none, single, double, triple


class SparseMolecularDataset:
    """Seeded synthetic stand-in for the QM9 sparse molecular dataset."""

    def __init__(self, n_mols=64, n_atoms=9, seed=0):
        rng = np.random.RandomState(seed)
        self.vertexes = n_atoms
        self.atom_num_types = len(MAX_VALENCE)
        self.bond_num_types = len(BOND_ORDER)
        self.x = rng.randint(1, self.atom_num_types, size=(n_mols, n_atoms))
        a = rng.randint(0, 2, size=(n_mols, n_atoms, n_atoms))
        a = np.triu(a, 1)
        self.a = a + a.transpose(0, 2, 1)
        self._ptr = 0

    def __len__(self):
        return len(self.x)

    def next_train_batch(self, batch_size):
        idx = np.arange(self._ptr, self._ptr + batch_size) % len(self)
        self._ptr += batch_size
        return None, self.a[idx], self.x[idx]


class MolecularMetrics:
    @staticmethod
    def valid_scores(a, x):
        bonds = BOND_ORDER[a].sum(-1)
        ok = (bonds <= MAX_VALENCE[x]) | (x == 0)
        return ok.all(-1).astype(np.float32)

    @staticmethod
    def qed_proxy(a, x):
        heavy = (x > 0).sum(-1)
        ring_like = (BOND_ORDER[a].sum((-1, -2)) / 2.0) - heavy + 1
        return np.clip(1.0 - np.abs(ring_like - 1) / 5.0, 0, 1).astype(np.float32)


class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_feature_list, b_dim, dropout):
        super().__init__()
        self.out_feature_list = out_feature_list
        self.linear1 = nn.Linear(in_features, out_feature_list[0])
        self.linear2 = nn.Linear(out_feature_list[0], out_feature_list[1])
        self.dropout = nn.Dropout(dropout)

    def forward(self, n_tensor, adj_tensor, h_tensor=None):
        annotations = torch.cat((n_tensor, h_tensor), -1) if h_tensor is not None else n_tensor
        output = self.linear1(annotations).unsqueeze(1)
        output = torch.matmul(adj_tensor, output).sum(1)
        output = self.dropout(torch.tanh(output))
        output = self.linear2(output).unsqueeze(1)
        output = torch.matmul(adj_tensor, output).sum(1)
        return self.dropout(torch.tanh(output))


class Generator(nn.Module):
    def __init__(self, conv_dims, z_dim, vertexes, edges, nodes, dropout):
        super().__init__()
        self.vertexes, self.edges, self.nodes = vertexes, edges, nodes
        layers = []
        for c0, c1 in zip([z_dim] + conv_dims[:-1], conv_dims):
            layers += [nn.Linear(c0, c1), nn.Tanh(), nn.Dropout(p=dropout)]
        self.layers = nn.Sequential(*layers)
        self.edges_layer = nn.Linear(conv_dims[-1], edges * vertexes * vertexes)
        self.nodes_layer = nn.Linear(conv_dims[-1], vertexes * nodes)

    def forward(self, x):
        output = self.layers(x)
        edges_logits = self.edges_layer(output).view(-1, self.edges, self.vertexes, self.vertexes)
        edges_logits = (edges_logits + edges_logits.permute(0, 1, 3, 2)) / 2
        edges_logits = edges_logits.permute(0, 2, 3, 1)
        nodes_logits = self.nodes_layer(output).view(-1, self.vertexes, self.nodes)
        return edges_logits, nodes_logits


class Discriminator(nn.Module):
    def __init__(self, conv_dim, m_dim, b_dim, dropout):
        super().__init__()
        graph_conv_dim, aux_dim, linear_dim = conv_dim
        self.gcn_layer = GraphConvolution(m_dim, graph_conv_dim, b_dim, dropout)
        self.agg_i = nn.Linear(graph_conv_dim[-1] + m_dim, aux_dim)
        self.agg_j = nn.Linear(graph_conv_dim[-1] + m_dim, aux_dim)
        self.linear = nn.Sequential(nn.Linear(aux_dim, linear_dim[0]), nn.Tanh())
        self.output_layer = nn.Linear(linear_dim[-1], 1)

    def forward(self, adj, hidden, node, activation=None):
        adj = adj[:, :, :, 1:].permute(0, 3, 1, 2)
        h = self.gcn_layer(node, adj, hidden)
        annotations = torch.cat((h, node), -1)
        i = torch.sigmoid(self.agg_i(annotations))
        j = torch.tanh(self.agg_j(annotations))
        h = torch.tanh(torch.sum(i * j, 1))
        h = self.linear(h)
        output = self.output_layer(h)
        output = activation(output) if activation is not None else output
        return output, h


class Solver:
    def __init__(self, config):
        self.data = SparseMolecularDataset(seed=config.seed)
        self.z_dim = config.z_dim
        self.m_dim = self.data.atom_num_types
        self.b_dim = self.data.bond_num_types
        self.la = config.lambda_wgan
        self.la_gp = config.lambda_gp
        self.post_method = config.post_method
        self.batch_size = config.batch_size
        self.num_epochs = config.num_epochs
        self.num_steps = len(self.data) // self.batch_size
        self.n_critic = config.n_critic if self.la > 0 else 1
        self.device = torch.device('cpu')
        self.build_model(config)

    def build_model(self, config):
        self.G = Generator(config.g_conv_dim, self.z_dim, self.data.vertexes, self.b_dim, self.m_dim, config.dropout)
        self.D = Discriminator(config.d_conv_dim, self.m_dim, self.b_dim - 1, config.dropout)
        self.V = Discriminator(config.d_conv_dim, self.m_dim, self.b_dim - 1, config.dropout)
        self.g_optimizer = torch.optim.RMSprop(self.G.parameters(), config.g_lr)
        self.d_optimizer = torch.optim.RMSprop(self.D.parameters(), config.d_lr)
        self.v_optimizer = torch.optim.RMSprop(self.V.parameters(), config.g_lr)

    def reset_grad(self):
        self.g_optimizer.zero_grad()
        self.d_optimizer.zero_grad()
        self.v_optimizer.zero_grad()

    def gradient_penalty(self, y, x):
        weight = torch.ones(y.size())
        dydx = torch.autograd.grad(outputs=y, inputs=x, grad_outputs=weight,
                                   retain_graph=True, create_graph=True, only_inputs=True)[0]
        dydx = dydx.view(dydx.size(0), -1)
        return torch.mean((torch.sqrt(torch.sum(dydx ** 2, dim=1)) - 1) ** 2)

    def label2onehot(self, labels, dim):
        out = torch.zeros(list(labels.size()) + [dim])
        out.scatter_(len(out.size()) - 1, labels.unsqueeze(-1), 1.)
        return out

    def sample_z(self, batch_size):
        return np.random.normal(0, 1, size=(batch_size, self.z_dim))

    @staticmethod
    def postprocess(inputs, method, temperature=1.):
        if method == 'soft_gumbel':
            return [F.gumbel_softmax(e.contiguous().view(-1, e.size(-1)) / temperature, hard=False).view(e.size())
                    for e in inputs]
        return [F.softmax(e / temperature, -1) for e in inputs]

    def reward(self, a, x):
        return (MolecularMetrics.valid_scores(a, x) * MolecularMetrics.qed_proxy(a, x)).reshape(-1, 1)

    def get_reward(self, n_hat, e_hat, method):
        (edges_hard, nodes_hard) = self.postprocess((e_hat, n_hat), method)
        edges_hard, nodes_hard = torch.max(edges_hard, -1)[1], torch.max(nodes_hard, -1)[1]
        return torch.from_numpy(self.reward(edges_hard.data.numpy(), nodes_hard.data.numpy()))

    def train_step(self, a, x, z, cur_step):
        a_tensor = self.label2onehot(a, self.b_dim)
        x_tensor = self.label2onehot(x, self.m_dim)

        # 2. Train the discriminator
        logits_real, features_real = self.D(a_tensor, None, x_tensor)
        edges_logits, nodes_logits = self.G(z)
        (edges_hat, nodes_hat) = self.postprocess((edges_logits, nodes_logits), self.post_method)
        logits_fake, features_fake = self.D(edges_hat, None, nodes_hat)
        eps = torch.rand(logits_real.size(0), 1, 1, 1)
        x_int0 = (eps * a_tensor + (1. - eps) * edges_hat).requires_grad_(True)
        x_int1 = (eps.squeeze(-1) * x_tensor + (1. - eps.squeeze(-1)) * nodes_hat).requires_grad_(True)
        grad0, grad1 = self.D(x_int0, None, x_int1)
        grad_penalty = self.gradient_penalty(grad0, x_int0) + self.gradient_penalty(grad1, x_int1)
        loss_D = -torch.mean(logits_real) + torch.mean(logits_fake) + self.la_gp * grad_penalty
        if cur_step % self.n_critic != 0 and self.la > 0:
            self.reset_grad()
            loss_D.backward()
            self.d_optimizer.step()

        # 3. Train the generator
        edges_logits, nodes_logits = self.G(z)
        (edges_hat, nodes_hat) = self.postprocess((edges_logits, nodes_logits), self.post_method)
        logits_fake, features_fake = self.D(edges_hat, None, nodes_hat)
        value_logit_real, _ = self.V(a_tensor, None, x_tensor, torch.sigmoid)
        value_logit_fake, _ = self.V(edges_hat, None, nodes_hat, torch.sigmoid)
        reward_r = torch.from_numpy(self.reward(a.numpy(), x.numpy()))
        reward_f = self.get_reward(nodes_hat, edges_hat, self.post_method)

        loss_G = torch.mean(-logits_fake)
        loss_V = torch.mean(torch.abs(value_logit_real - reward_r) + torch.abs(value_logit_fake - reward_f))
        loss_RL = torch.mean(-value_logit_fake)
        alpha = torch.abs(loss_G.detach() / loss_RL.detach()).detach()
        train_step_G = self.la * loss_G + (1 - self.la) * alpha * loss_RL
        train_step_V = loss_V

        self.reset_grad()
        if cur_step % self.n_critic == 0:
            train_step_G.backward(retain_graph=True)
        if cur_step % self.n_critic == 0:
            train_step_V.backward()
            self.g_optimizer.step()
            self.v_optimizer.step()
        return {'l_D': loss_D.item(), 'l_G': loss_G.item(), 'l_V': loss_V.item(), 'l_RL': loss_RL.item()}

    def train(self):
        start_time = time.time()
        for epoch_i in range(self.num_epochs):
            losses = defaultdict(list)
            for a_step in range(self.num_steps):
                _, a, x = self.data.next_train_batch(self.batch_size)
                a = torch.from_numpy(a).long()
                x = torch.from_numpy(x).long()
                z = torch.from_numpy(self.sample_z(self.batch_size)).float()
                for k, v in self.train_step(a, x, z, self.num_steps * epoch_i + a_step).items():
                    losses[k].append(v)
            et = str(datetime.timedelta(seconds=time.time() - start_time))[:-7]
            print('Elapsed [{}], Iteration [{}/{}]: '.format(et, epoch_i + 1, self.num_epochs)
                  + ', '.join('{}: {:.3f}'.format(k, np.mean(v)) for k, v in losses.items()))


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    config = SimpleNamespace(z_dim=8, g_conv_dim=[32, 64], d_conv_dim=[[32, 16], 32, [32]], lambda_wgan=0.5,
                             lambda_gp=10.0, post_method='softmax', batch_size=16, num_epochs=2, n_critic=2,
                             g_lr=1e-3, d_lr=1e-3, dropout=0.0, seed=0)
    Solver(config).train()


if __name__ == '__main__':
    main()
