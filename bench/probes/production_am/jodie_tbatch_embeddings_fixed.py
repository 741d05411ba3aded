# expect: clean
# source: https://github.com/claws-lab/jodie/issues/13
"""JODIE: dynamic user/item embedding trajectories for next-interaction prediction.

Users and items carry dynamic embeddings that two mutually-recursive RNN cells update
after every interaction; a projection operator moves a user embedding forward in time,
and the model predicts the embedding of the next item (plus a state-change label).
Interactions arrive in temporal order and are grouped into t-batches (no user or item
twice in a t-batch); the loss is back-propagated once per timespan.  Synthetic
interaction log (users, items, features, time gaps, labels), CPU only.
"""
import argparse
import math
import random
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--num_users", type=int, default=12)
    p.add_argument("--num_items", type=int, default=10)
    p.add_argument("--num_interactions", type=int, default=120)
    p.add_argument("--num_features", type=int, default=4)
    p.add_argument("--train_proportion", type=float, default=0.8)
    p.add_argument("--timespans", type=int, default=6)
    p.add_argument("--state_change", type=bool, default=True)
    p.add_argument("--seed", type=int, default=3)
    return p.parse_args(argv)


class NormalLinear(nn.Linear):
    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.weight.size(1))
        self.weight.data.normal_(0, stdv)
        if self.bias is not None:
            self.bias.data.normal_(0, stdv)


class JODIE(nn.Module):
    def __init__(self, args, num_features, num_users, num_items):
        super().__init__()
        dim = args.embedding_dim
        self.user_static_embedding_size = num_users
        self.item_static_embedding_size = num_items
        rnn_input_size = dim + 1 + num_features
        self.item_rnn = nn.RNNCell(rnn_input_size, dim)
        self.user_rnn = nn.RNNCell(rnn_input_size, dim)
        self.linear_layer1 = nn.Linear(dim, 50)
        self.linear_layer2 = nn.Linear(50, 2)
        self.prediction_layer = nn.Linear(num_users + num_items + 2 * dim, num_items + dim)
        self.embedding_layer = NormalLinear(1, dim)

    def forward(self, user_embeddings, item_embeddings, timediffs=None, features=None, select=None):
        if select == "item_update":
            return F.normalize(self.item_rnn(torch.cat([user_embeddings, timediffs, features], dim=1), item_embeddings))
        if select == "user_update":
            return F.normalize(self.user_rnn(torch.cat([item_embeddings, timediffs, features], dim=1), user_embeddings))
        if select == "project":
            return user_embeddings * (1 + self.embedding_layer(timediffs))
        raise ValueError(select)

    def predict_label(self, user_embeddings):
        return self.linear_layer2(F.relu(self.linear_layer1(user_embeddings)))

    def predict_item_embedding(self, user_embeddings):
        return self.prediction_layer(user_embeddings)


class TBatcher:
    """T-batch bookkeeping (library_models globals in the original)."""

    def __init__(self):
        self.reinitialize()

    def reinitialize(self):
        self.tbatchid_user = defaultdict(lambda: -1)
        self.tbatchid_item = defaultdict(lambda: -1)
        self.batches = defaultdict(lambda: defaultdict(list))

    def insert(self, j, userid, itemid, feature, user_td, item_td, prev_item):
        k = max(self.tbatchid_user[userid], self.tbatchid_item[itemid]) + 1
        self.tbatchid_user[userid] = k
        self.tbatchid_item[itemid] = k
        b = self.batches[k]
        for key, val in (("user", userid), ("item", itemid), ("feature", feature), ("ids", j),
                         ("user_td", user_td), ("item_td", item_td), ("prev_item", prev_item)):
            b[key].append(val)

    def __len__(self):
        return len(self.batches)


def load_network(args, rng):
    users = [rng.randrange(args.num_users) for _ in range(args.num_interactions)]
    items = [(u * 3 + rng.randrange(3)) % args.num_items for u in users]
    ts = np.cumsum([rng.random() for _ in range(args.num_interactions)])
    feats = [[rng.gauss(0, 1) for _ in range(args.num_features)] for _ in range(args.num_interactions)]
    last_u, last_i, prev_item = {}, {}, {}
    user_td, item_td, prev = [], [], []
    for j, (u, i, t) in enumerate(zip(users, items, ts)):
        user_td.append(t - last_u.get(u, t))
        item_td.append(t - last_i.get(i, t))
        prev.append(prev_item.get(u, args.num_items))
        last_u[u], last_i[i], prev_item[u] = t, t, i
    y_true = [int(rng.random() < 0.1) for _ in users]
    return users, items, list(ts), feats, user_td, item_td, prev, y_true


def calculate_state_prediction_loss(model, tbatch_interactionids, user_embeddings_time_series, y_true, loss_function):
    prob = model.predict_label(user_embeddings_time_series[tbatch_interactionids, :])
    y = torch.LongTensor([y_true[k] for k in tbatch_interactionids.tolist()])
    return loss_function(prob, y)


class JodieTrainer:
    def __init__(self, args, data):
        self.args = args
        (self.users, self.items, self.ts, self.feats, self.user_td, self.item_td,
         self.prev_item, self.y_true) = data
        self.num_items = args.num_items + 1  # one extra item for "none-of-these"
        self.model = JODIE(args, args.num_features, args.num_users, self.num_items)
        ratio = len(self.y_true) / (1.0 + sum(self.y_true))
        self.crossEntropyLoss = nn.CrossEntropyLoss(weight=torch.Tensor([1, ratio]))
        self.MSELoss = nn.MSELoss()
        self.initial_user_embedding = nn.Parameter(F.normalize(torch.rand(args.embedding_dim), dim=0))
        self.initial_item_embedding = nn.Parameter(F.normalize(torch.rand(args.embedding_dim), dim=0))
        self.model.initial_user_embedding = self.initial_user_embedding
        self.model.initial_item_embedding = self.initial_item_embedding
        self.item_embedding_static = torch.eye(self.num_items)
        self.user_embedding_static = torch.eye(args.num_users)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3, weight_decay=1e-5)
        self.train_end_idx = int(len(self.users) * args.train_proportion)
        self.tbatch_timespan = (self.ts[-1] - self.ts[0]) / args.timespans
        self.tb = TBatcher()

    def run_tbatches(self, user_embeddings, item_embeddings, user_ts, item_ts):
        loss = 0
        for k in range(len(self.tb)):
            b = self.tb.batches[k]
            uids, iids = torch.LongTensor(b["user"]), torch.LongTensor(b["item"])
            ids = torch.LongTensor(b["ids"])
            feature_tensor = torch.Tensor(b["feature"])
            user_td = torch.Tensor(b["user_td"]).unsqueeze(1)
            item_td = torch.Tensor(b["item_td"]).unsqueeze(1)
            prev_ids = torch.LongTensor(b["prev_item"])
            item_embedding_previous = item_embeddings[prev_ids, :]

            user_embedding_input = user_embeddings[uids, :]
            user_projected = self.model(user_embedding_input, item_embedding_previous, timediffs=user_td,
                                        features=feature_tensor, select="project")
            user_item_embedding = torch.cat([user_projected, item_embedding_previous,
                                             self.item_embedding_static[prev_ids, :], self.user_embedding_static[uids, :]], dim=1)
            predicted_item_embedding = self.model.predict_item_embedding(user_item_embedding)
            item_embedding_input = item_embeddings[iids, :]
            loss += self.MSELoss(predicted_item_embedding,
                                 torch.cat([item_embedding_input, self.item_embedding_static[iids, :]], dim=1).detach())

            user_out = self.model(user_embedding_input, item_embedding_input, timediffs=user_td, features=feature_tensor, select="user_update")
            item_out = self.model(user_embedding_input, item_embedding_input, timediffs=item_td, features=feature_tensor, select="item_update")
            item_embeddings[iids, :] = item_out
            user_embeddings[uids, :] = user_out
            user_ts[ids, :] = user_out
            item_ts[ids, :] = item_out

            loss += self.MSELoss(item_out, item_embedding_input.detach())
            loss += self.MSELoss(user_out, user_embedding_input.detach())
            if self.args.state_change:
                loss += calculate_state_prediction_loss(self.model, ids, user_ts, self.y_true, self.crossEntropyLoss)
        return loss

    def train_epoch(self, ep):
        args = self.args
        user_embeddings = self.initial_user_embedding.repeat(args.num_users, 1)
        item_embeddings = self.initial_item_embedding.repeat(self.num_items, 1)
        user_ts = torch.zeros(len(self.users), args.embedding_dim)
        item_ts = torch.zeros(len(self.users), args.embedding_dim)
        self.optimizer.zero_grad()
        self.tb.reinitialize()
        total_loss, tbatch_start_time = 0.0, None
        for j in range(self.train_end_idx):
            self.tb.insert(j, self.users[j], self.items[j], self.feats[j], self.user_td[j], self.item_td[j], self.prev_item[j])
            if tbatch_start_time is None:
                tbatch_start_time = self.ts[j]
            if self.ts[j] - tbatch_start_time > self.tbatch_timespan:
                tbatch_start_time = self.ts[j]
                loss = self.run_tbatches(user_embeddings, item_embeddings, user_ts, item_ts)
                total_loss += loss.item()
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
                item_embeddings.detach_()  # Detachment is needed to prevent double propagation of gradient
                user_embeddings.detach_()
                item_ts.detach_()
                user_ts.detach_()
                self.tb.reinitialize()
        print(f"Epoch {ep}: total loss {total_loss:.4f}")
        return user_embeddings, item_embeddings

    def train(self):
        for ep in range(self.args.epochs):
            self.train_epoch(ep)


def main(argv=None):
    args = get_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    data = load_network(args, random.Random(args.seed))
    trainer = JodieTrainer(args, data)
    trainer.train()


if __name__ == "__main__":
    main([])
