# expect: grad_unused
# source: https://github.com/gitabcworld/FewShotLearning/issues/3
"""Meta-learned optimiser (Ravi & Larochelle meta-LSTM) for cold-start recommendation.

Every episode is a cold-start user: a handful of rated items (support set) and
held-out items to rank (query set).  A small rating learner is adapted to
the user by a meta-learner: an input LSTM encodes (gradient, loss) per
parameter coordinate and a MetaLSTM cell whose cell state *is* the learner's
flattened parameter vector produces the updated parameters.  The meta-learner
is trained on the query loss of the adapted learner.  Item features and user
preference vectors are seeded synthetic data.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------- utils
def flatten_params(model):
    return torch.cat([p.view(-1) for p in model.parameters()], 0)


def unflatten_params(model, flat_params):
    """Copy a flat parameter vector into the learner's parameters."""
    idx = 0
    for p in model.parameters():
        n = p.numel()
        p.data.copy_(flat_params[idx:idx + n].view_as(p))
        idx += n


def preprocess(x, p=10.0):
    """Gradient/loss preprocessing from 'Learning to learn by gradient descent by gradient descent'."""
    indicator = (x.abs() >= math.exp(-p)).float()
    x_proc1 = indicator * torch.log(x.abs() + 1e-8) / p + (1 - indicator) * -1
    x_proc2 = indicator * torch.sign(x) + (1 - indicator) * math.exp(p) * x
    return torch.stack((x_proc1, x_proc2), -1)


# --------------------------------------------------------------------- learner
class RatingLearner(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def n_params(self):
        return sum(p.numel() for p in self.model.parameters())

    def forward(self, x, y):
        pred = self.model(x).squeeze(-1)
        return pred, F.mse_loss(pred, y)

    def feval(self, x, y):
        """Gradient and loss of the learner on a support batch (first-order inputs)."""
        _, loss = self.forward(x, y)
        grads = torch.autograd.grad(loss, list(self.model.parameters()))
        return torch.cat([g.view(-1) for g in grads]).detach(), loss.detach()

    def reset(self):
        for m in self.model:
            if isinstance(m, nn.Linear):
                m.reset_parameters()


# ------------------------------------------------------------------ meta-learner
class MetaLSTMCell(nn.Module):
    """c_t = f_t * c_{t-1} - i_t * grad_t, with c_0 = initial learner parameters."""

    def __init__(self, input_size, hidden_size, n_learner_params):
        super().__init__()
        self.WF = nn.Parameter(torch.empty(input_size + 1 + hidden_size, hidden_size))
        self.WI = nn.Parameter(torch.empty(input_size + 1 + hidden_size, hidden_size))
        self.cI = nn.Parameter(torch.empty(n_learner_params, 1))
        self.bI = nn.Parameter(torch.empty(1, hidden_size))
        self.bF = nn.Parameter(torch.empty(1, hidden_size))
        self.reset_parameters()

    def reset_parameters(self):
        for w in (self.WF, self.WI, self.cI):
            nn.init.uniform_(w, -0.01, 0.01)
        nn.init.uniform_(self.bF, 4, 6)
        nn.init.uniform_(self.bI, -5, -4)

    def forward(self, inputs, hx=None):
        x_all, grad = inputs
        n = x_all.size(0)
        if hx is None:
            f_prev = torch.zeros((n, self.WF.size(1)))
            i_prev = torch.zeros((n, self.WI.size(1)))
            c_prev = self.cI
            hx = [f_prev, i_prev, c_prev]
        f_prev, i_prev, c_prev = hx
        f_next = torch.sigmoid(torch.mm(torch.cat((x_all, c_prev, f_prev), 1), self.WF) + self.bF.expand_as(f_prev))
        i_next = torch.sigmoid(torch.mm(torch.cat((x_all, c_prev, i_prev), 1), self.WI) + self.bI.expand_as(i_prev))
        c_next = f_next.mean(1, keepdim=True) * c_prev - i_next.mean(1, keepdim=True) * grad
        return c_next, [f_next, i_next, c_next]


class MetaLearner(nn.Module):
    def __init__(self, opt, learner):
        super().__init__()
        self.n_hidden = opt.n_hidden
        self.lstm = nn.LSTM(input_size=4, hidden_size=opt.n_hidden, batch_first=True)
        self.lstm2 = MetaLSTMCell(opt.n_hidden, opt.n_hidden, learner.n_params())
        with torch.no_grad():
            self.lstm2.cI.copy_(flatten_params(learner.model).unsqueeze(1))

    def forward(self, learner, train_x, train_y, test_x, test_y, steps, batch_size):
        learner.reset()
        learner.train()
        unflatten_params(learner.model, self.lstm2.cI.view(-1))
        hs, cs = None, None
        for s in range(steps):
            for i in range(0, train_x.size(0), batch_size):
                x, y = train_x[i:i + batch_size], train_y[i:i + batch_size]
                grad, loss = learner.feval(x, y)
                inputs = torch.cat((preprocess(grad), preprocess(loss).expand(grad.size(0), 2)), 1)
                output, hs = self.lstm(inputs.unsqueeze(1), hs)
                flat, cs = self.lstm2((output.squeeze(1), grad.unsqueeze(1)), cs)
                unflatten_params(learner.model, flat.view(-1))
        _, loss = learner(test_x, test_y)
        grads = torch.autograd.grad(loss, list(self.lstm2.parameters()) + list(self.lstm.parameters()))  # raises
        return loss, grads


# ---------------------------------------------------------------------- data
class ColdStartEpisodes:
    def __init__(self, n_items, n_features, seed):
        rng = np.random.RandomState(seed)
        self.rng = rng
        self.items = torch.from_numpy(rng.randn(n_items, n_features).astype(np.float32))

    def sample(self, n_support, n_query):
        user = torch.from_numpy(self.rng.randn(self.items.size(1)).astype(np.float32))
        idx = torch.from_numpy(self.rng.choice(self.items.size(0), n_support + n_query, replace=False))
        x = self.items[idx]
        y = torch.tanh(x @ user / math.sqrt(x.size(1))) * 2 + 3
        return x[:n_support], y[:n_support], x[n_support:], y[n_support:]


class MetaTrainer:
    def __init__(self, opt):
        self.opt = opt
        self.learner = RatingLearner(opt.n_features, opt.learner_hidden)
        self.meta_learner = MetaLearner(opt, self.learner)
        self.optimizer = torch.optim.Adam(self.meta_learner.parameters(), lr=opt.lr)
        self.data = ColdStartEpisodes(opt.n_items, opt.n_features, seed=opt.seed)

    def train_step(self):
        sx, sy, qx, qy = self.data.sample(self.opt.n_support, self.opt.n_query)
        loss, grads = self.meta_learner(self.learner, sx, sy, qx, qy, self.opt.steps, self.opt.batch_size)
        self.optimizer.zero_grad()
        params = list(self.meta_learner.lstm2.parameters()) + list(self.meta_learner.lstm.parameters())
        for p, g in zip(params, grads):
            p.grad = g.clamp(-self.opt.max_grad_norm, self.opt.max_grad_norm)
        self.optimizer.step()
        return loss.item()

    def fit(self):
        for episode in range(self.opt.episodes):
            print('episode %d | query mse %.4f' % (episode, self.train_step()))


def main():
    torch.manual_seed(0)
    opt = SimpleNamespace(n_items=200, n_features=8, learner_hidden=8, n_hidden=6, n_support=10, n_query=10,
                          steps=2, batch_size=5, lr=1e-3, max_grad_norm=0.25, episodes=3, seed=0)
    MetaTrainer(opt).fit()


if __name__ == '__main__':
    main()
