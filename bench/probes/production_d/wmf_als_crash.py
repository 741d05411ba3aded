# expect: leaf_inplace
# source: https://github.com/graytowne/revisit_adv_rec/issues/3
"""Weighted matrix factorisation surrogate for implicit-feedback recommendation.

The factors live in two embedding tables.  A couple of epochs of BPR with
sampled negatives (sparse gradients, SparseAdam) warm the tables up, then the
trainer switches to closed-form ALS sweeps, which is what the attack pipeline
uses for the surrogate model.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Bunch(dict):
    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError as e:
            raise AttributeError(key) from e

    __setattr__ = dict.__setitem__


DEFAULT_ARGS = Bunch(
    seed=0, n_users=40, n_items=60, density=0.08,
    model=Bunch(hidden_dims=[8], weight_alpha=20.0),
    lr=0.05, l2=0.1, batch_size=16, n_neg=2,
    schedule=["bpr", "als", "als"], metrics=["recall@10"],
)


def make_implicit_data(args):
    rng = np.random.RandomState(args.seed)
    user_f = rng.randn(args.n_users, 3)
    item_f = rng.randn(args.n_items, 3)
    logits = user_f @ item_f.T
    thresh = np.quantile(logits, 1.0 - args.density)
    return (logits > thresh).astype(np.float32)


class WeightedMF(nn.Module):
    def __init__(self, n_users, n_items, model_args):
        super().__init__()
        if len(model_args.hidden_dims) > 1:
            raise ValueError("WMF can only have one latent dimension.")
        self.dim = model_args.hidden_dims[0]
        self.user_factors = nn.Embedding(n_users, self.dim, sparse=True)
        self.item_factors = nn.Embedding(n_items, self.dim, sparse=True)
        nn.init.normal_(self.user_factors.weight, std=0.1)
        nn.init.normal_(self.item_factors.weight, std=0.1)

    @property
    def P(self):
        return self.user_factors.weight

    @property
    def Q(self):
        return self.item_factors.weight

    def forward(self, user_id=None):
        if user_id is None:
            return self.P @ self.Q.t()
        return self.user_factors(user_id) @ self.Q.t()

    def score(self, users, items):
        return (self.user_factors(users) * self.item_factors(items)).sum(-1)


class NegativeSampler:
    def __init__(self, data, n_neg, seed):
        self.pos = [np.flatnonzero(row) for row in data]
        self.n_items = data.shape[1]
        self.n_neg = n_neg
        self.rng = np.random.RandomState(seed)

    def sample(self, users):
        u, i, j = [], [], []
        for user in users:
            if len(self.pos[user]) == 0:
                continue
            for _ in range(self.n_neg):
                neg = self.rng.randint(self.n_items)
                while neg in self.pos[user]:
                    neg = self.rng.randint(self.n_items)
                u.append(user)
                i.append(self.rng.choice(self.pos[user]))
                j.append(neg)
        return torch.tensor(u), torch.tensor(i), torch.tensor(j)


class WMFTrainer:
    def __init__(self, n_users, n_items, args):
        self.args = args
        self.n_users, self.n_items = n_users, n_items
        self.net = WeightedMF(n_users, n_items, args.model)
        self.optimizer = torch.optim.SparseAdam(list(self.net.parameters()), lr=args.lr)
        self.weight_alpha = args.model.weight_alpha
        self.dim = self.net.dim
        self._train_fns = {"bpr": self.train_bpr, "als": self.train_als}

    def train_epoch(self, method, data):
        if method not in self._train_fns:
            raise ValueError("Unknown optim_method {} for WMF.".format(method))
        return self._train_fns[method](data)

    def train_bpr(self, data):
        sampler = NegativeSampler(data, self.args.n_neg, self.args.seed)
        users = np.random.permutation(self.n_users)
        epoch_loss = 0.0
        for start in range(0, len(users), self.args.batch_size):
            u, i, j = sampler.sample(users[start:start + self.args.batch_size])
            loss = -F.logsigmoid(self.net.score(u, i) - self.net.score(u, j)).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            epoch_loss += loss.item()
        return epoch_loss

    def _solve_rows(self, fixed, data_rows):
        """Closed-form weighted ridge regression for every row of data_rows."""
        weight_alpha = self.weight_alpha - 1
        lamda_eye = torch.eye(self.dim) * self.args.l2
        residual = fixed.t() @ fixed + lamda_eye
        for idx, row in enumerate(data_rows):
            x = torch.from_numpy(row).view(-1, 1)
            c = torch.from_numpy(row * weight_alpha + 1)
            lhs = fixed.t() @ ((c - 1)[:, None] * fixed) + residual
            rhs = fixed.t() @ (c[:, None] * x)
            yield idx, torch.linalg.solve(lhs, rhs)

    def train_als(self, data):
        model = self.net
        P = model.P.detach()
        Q = model.Q.detach()
        # Update P with Q fixed
        for user, new_p_u in self._solve_rows(Q, data):
            model.P[user] = new_p_u.t()  # raises
        # Update Q with P fixed
        for item, new_q_v in self._solve_rows(P, data.T):
            model.Q[item] = new_q_v.t()
        return 0.0

    @torch.no_grad()
    def recall_at_k(self, data, k=10):
        scores = self.net()
        top = scores.topk(k, dim=1).indices.numpy()
        hits = [data[u, top[u]].sum() / max(1.0, data[u].sum()) for u in range(self.n_users)]
        return float(np.mean(hits))


def main(args=DEFAULT_ARGS):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    data = make_implicit_data(args)
    trainer = WMFTrainer(args.n_users, args.n_items, args)
    for epoch, method in enumerate(args.schedule, start=1):
        t1 = time.time()
        loss = trainer.train_epoch(method, data)
        print("Training [{:.1f} s], epoch: {} ({}), loss: {:.4f}, recall@10: {:.3f}".format(
            time.time() - t1, epoch, method, loss, trainer.recall_at_k(data)))


if __name__ == "__main__":
    main()
