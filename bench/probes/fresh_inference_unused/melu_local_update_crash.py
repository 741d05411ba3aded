# expect: grad_unused
# source: https://github.com/waterhorse1/MELU_pytorch/issues/4
import argparse
import copy
import random

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


def parse_args():
    parser = argparse.ArgumentParser([], description='MeLU on my own data')
    parser.add_argument('--seed', type=int, default=53)
    parser.add_argument('--tasks_per_metaupdate', type=int, default=4)
    parser.add_argument('--lr_inner', type=float, default=0.01, help='inner-loop learning rate (per task)')
    parser.add_argument('--lr_meta', type=float, default=1e-3, help='outer-loop learning rate')
    parser.add_argument('--num_grad_steps_inner', type=int, default=2)
    parser.add_argument('--embedding_dim', type=int, default=8)
    parser.add_argument('--first_fc_hidden_dim', type=int, default=16)
    parser.add_argument('--second_fc_hidden_dim', type=int, default=16)
    parser.add_argument('--num_epoch', type=int, default=2)
    parser.add_argument('--num_genre', type=int, default=25)
    parser.add_argument('--num_director', type=int, default=40)
    parser.add_argument('--num_actor', type=int, default=60)
    parser.add_argument('--num_rate', type=int, default=6)
    parser.add_argument('--num_gender', type=int, default=2)
    parser.add_argument('--num_age', type=int, default=7)
    parser.add_argument('--num_occupation', type=int, default=21)
    parser.add_argument('--num_zipcode', type=int, default=30)
    return parser.parse_args([])


class Linear(nn.Linear):  # used in MAML to forward input with fast weight
    def __init__(self, in_features, out_features):
        super(Linear, self).__init__(in_features, out_features)
        self.weight.fast = None
        self.bias.fast = None

    def forward(self, x):
        if self.weight.fast is not None and self.bias.fast is not None:
            out = F.linear(x, self.weight.fast, self.bias.fast)
        else:
            out = super(Linear, self).forward(x)
        return out


class item(torch.nn.Module):
    def __init__(self, config):
        super(item, self).__init__()
        self.num_rate = config.num_rate
        self.num_genre = config.num_genre
        self.num_director = config.num_director
        self.num_actor = config.num_actor
        self.embedding_dim = config.embedding_dim

        self.embedding_rate = torch.nn.Embedding(num_embeddings=self.num_rate, embedding_dim=self.embedding_dim)
        self.embedding_genre = torch.nn.Linear(in_features=self.num_genre, out_features=self.embedding_dim, bias=False)
        self.embedding_director = torch.nn.Linear(in_features=self.num_director, out_features=self.embedding_dim,
                                                  bias=False)
        self.embedding_actor = torch.nn.Linear(in_features=self.num_actor, out_features=self.embedding_dim, bias=False)

    def forward(self, rate_idx, genre_idx, director_idx, vars=None):
        rate_emb = self.embedding_rate(rate_idx)
        genre_emb = self.embedding_genre(genre_idx.float()) / torch.sum(genre_idx.float(), 1).view(-1, 1)
        director_emb = self.embedding_director(director_idx.float()) / torch.sum(director_idx.float(), 1).view(-1, 1)
        return torch.cat((rate_emb, genre_emb, director_emb), 1)


class user(torch.nn.Module):
    def __init__(self, config):
        super(user, self).__init__()
        self.embedding_gender = torch.nn.Embedding(config.num_gender, config.embedding_dim)
        self.embedding_age = torch.nn.Embedding(config.num_age, config.embedding_dim)
        self.embedding_occupation = torch.nn.Embedding(config.num_occupation, config.embedding_dim)
        self.embedding_area = torch.nn.Embedding(config.num_zipcode, config.embedding_dim)

    def forward(self, gender_idx, age_idx, occupation_idx, area_idx):
        gender_emb = self.embedding_gender(gender_idx)
        age_emb = self.embedding_age(age_idx)
        occupation_emb = self.embedding_occupation(occupation_idx)
        area_emb = self.embedding_area(area_idx)
        return torch.cat((gender_emb, age_emb, occupation_emb, area_emb), 1)


class user_preference_estimator(torch.nn.Module):
    def __init__(self, config):
        super(user_preference_estimator, self).__init__()
        self.config = config
        self.embedding_dim = config.embedding_dim
        self.fc1_in_dim = config.embedding_dim * 7
        self.fc2_in_dim = config.first_fc_hidden_dim
        self.fc2_out_dim = config.second_fc_hidden_dim

        self.item_emb = item(config)
        self.user_emb = user(config)
        self.fc1 = Linear(self.fc1_in_dim, self.fc2_in_dim)
        self.fc2 = Linear(self.fc2_in_dim, self.fc2_out_dim)
        self.linear_out = Linear(self.fc2_out_dim, 1)
        self.final_part = nn.Sequential(self.fc1, nn.ReLU(), self.fc2, nn.ReLU(), self.linear_out)

    def forward(self, x, training=True):
        c = self.config
        rate_idx = x[:, 0]
        genre_idx = x[:, 1:1 + c.num_genre]
        director_idx = x[:, 1 + c.num_genre:1 + c.num_genre + c.num_director]
        offset = 1 + c.num_genre + c.num_director
        gender_idx, age_idx, occupation_idx, area_idx = x[:, offset], x[:, offset + 1], x[:, offset + 2], x[:, offset + 3]

        item_emb = self.item_emb(rate_idx, genre_idx, director_idx)
        user_emb = self.user_emb(gender_idx, age_idx, occupation_idx, area_idx)
        x = torch.cat((item_emb, user_emb), 1)
        x = self.final_part(x)
        return x


def make_task(config, n_items, rng):
    def multi_hot(n):
        v = (rng.random((n_items, n)) < 0.1).astype(np.int64)
        v[np.arange(n_items), rng.integers(0, n, n_items)] = 1
        return v
    cols = [rng.integers(0, config.num_rate, (n_items, 1)), multi_hot(config.num_genre), multi_hot(config.num_director),
            np.tile([rng.integers(0, config.num_gender), rng.integers(0, config.num_age),
                     rng.integers(0, config.num_occupation), rng.integers(0, config.num_zipcode)], (n_items, 1))]
    x = torch.from_numpy(np.concatenate(cols, axis=1))
    y = torch.from_numpy(rng.integers(1, 6, (n_items, 1)).astype(np.float32))
    return x[:n_items // 2], y[:n_items // 2], x[n_items // 2:], y[n_items // 2:]


def run(args):
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    tasks = [make_task(args, 20, rng) for _ in range(8)]

    model = user_preference_estimator(args)
    model.train()
    print(sum([param.nelement() for param in model.parameters()]))
    meta_optimiser = torch.optim.Adam(model.parameters(), args.lr_meta)
    meta_grad_init = [0 for _ in range(len(model.state_dict()))]

    for epoch in range(args.num_epoch):
        for start in range(0, len(tasks), args.tasks_per_metaupdate):
            x_spt, y_spt, x_qry, y_qry = zip(*tasks[start:start + args.tasks_per_metaupdate])
            meta_grad = copy.deepcopy(meta_grad_init)
            loss_pre = []
            loss_after = []
            for i in range(args.tasks_per_metaupdate):
                loss_pre.append(F.mse_loss(model(x_qry[i]), y_qry[i]).item())
                fast_parameters = model.final_part.parameters()
                for weight in model.final_part.parameters():
                    weight.fast = None
                for k in range(args.num_grad_steps_inner):
                    logits = model(x_spt[i])
                    loss = F.mse_loss(logits, y_spt[i])
                    grad = torch.autograd.grad(loss, fast_parameters, create_graph=True)
                    fast_parameters = []
                    for k, weight in enumerate(model.final_part.parameters()):
                        if weight.fast is None:
                            weight.fast = weight - args.lr_inner * grad[k]
                        else:
                            weight.fast = weight.fast - args.lr_inner * grad[k]
                        fast_parameters.append(weight.fast)

                logits_q = model(x_qry[i])
                loss_q = F.mse_loss(logits_q, y_qry[i])
                loss_after.append(loss_q.item())
                task_grad_test = torch.autograd.grad(loss_q, model.parameters())  # raises

                for g in range(len(task_grad_test)):
                    meta_grad[g] += task_grad_test[g].detach()

            meta_optimiser.zero_grad()
            for c, param in enumerate(model.parameters()):
                param.grad = meta_grad[c] / float(args.tasks_per_metaupdate)
                param.grad.data.clamp_(-10, 10)
            meta_optimiser.step()
            for weight in model.final_part.parameters():
                weight.fast = None
        print('epoch {}: loss before {:.4f}, loss after {:.4f}'.format(epoch, np.mean(loss_pre), np.mean(loss_after)))


if __name__ == '__main__':
    run(parse_args())
