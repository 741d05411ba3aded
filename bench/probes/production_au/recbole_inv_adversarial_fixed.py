# expect: clean
# source: https://github.com/RUCAIBox/RecBole/issues/2123
"""Invariant collaborative filtering with an adversarial environment generator (RecBole style).

The model (INV) is a BPR matrix-factorisation recommender plus an `env_generator` that
softly assigns each training interaction to one of K latent environments.  The
recommender minimises the BPR risk plus the variance of the per-environment risks; the
environment generator is trained adversarially to maximise that variance.  INVTrainer
extends the usual RecBole Trainer with two optimisers: one over the recommender
parameters (every batch) and one over the env_generator parameters (every few batches).
"""
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


class Interaction:
    def __init__(self, interaction):
        self.interaction = interaction

    def __getitem__(self, key):
        return self.interaction[key]

    def __len__(self):
        return len(next(iter(self.interaction.values())))


class TrainDataLoader:
    def __init__(self, config, n_users, n_items, n_inter):
        rng = np.random.RandomState(config["seed"])
        self.users = rng.randint(0, n_users, size=n_inter)
        self.items = (self.users * 7 + rng.randint(0, 5, size=n_inter)) % n_items
        self.n_items = n_items
        self.batch_size = config["train_batch_size"]
        self.rng = rng

    def __iter__(self):
        order = self.rng.permutation(len(self.users))
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            neg = self.rng.randint(0, self.n_items, size=len(idx))
            yield Interaction({"user_id": torch.tensor(self.users[idx]),
                               "item_id": torch.tensor(self.items[idx]),
                               "neg_item_id": torch.tensor(neg)})

    def __len__(self):
        return (len(self.users) + self.batch_size - 1) // self.batch_size


class BPRLoss(nn.Module):
    def __init__(self, gamma=1e-10):
        super().__init__()
        self.gamma = gamma

    def forward(self, pos_score, neg_score):
        return -torch.log(self.gamma + torch.sigmoid(pos_score - neg_score))


class EmbLoss(nn.Module):
    def forward(self, *embeddings):
        return sum(torch.norm(e, p=2) ** 2 for e in embeddings) / embeddings[-1].shape[0] / 2


class GeneralRecommender(nn.Module):
    def __init__(self, config, dataset):
        super().__init__()
        self.USER_ID, self.ITEM_ID, self.NEG_ITEM_ID = "user_id", "item_id", "neg_item_id"
        self.n_users, self.n_items = dataset["n_users"], dataset["n_items"]
        self.device = config["device"]


class INV(GeneralRecommender):
    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.embedding_size = config["embedding_size"]
        self.n_envs = config["n_envs"]
        self.inv_weight = config["inv_weight"]
        self.reg_weight = config["reg_weight"]
        self.user_embedding = nn.Embedding(self.n_users, self.embedding_size)
        self.item_embedding = nn.Embedding(self.n_items, self.embedding_size)
        self.env_generator = nn.Sequential(nn.Linear(2 * self.embedding_size, 16), nn.Tanh(),
                                           nn.Linear(16, self.n_envs))
        self.loss = BPRLoss()
        self.reg_loss = EmbLoss()
        nn.init.xavier_normal_(self.user_embedding.weight)
        nn.init.xavier_normal_(self.item_embedding.weight)

    def env_probs(self, user_e, item_e):
        feats = torch.cat([user_e, item_e], dim=-1).detach()
        return torch.softmax(self.env_generator(feats), dim=-1)

    def calculate_loss(self, interaction):
        user = interaction[self.USER_ID]
        pos_item = interaction[self.ITEM_ID]
        neg_item = interaction[self.NEG_ITEM_ID]
        user_e = self.user_embedding(user)
        pos_e, neg_e = self.item_embedding(pos_item), self.item_embedding(neg_item)
        pos_score = torch.mul(user_e, pos_e).sum(dim=1)
        neg_score = torch.mul(user_e, neg_e).sum(dim=1)
        per_sample = self.loss(pos_score, neg_score)
        probs = self.env_probs(user_e, pos_e)
        env_risk = (probs * per_sample[:, None]).sum(0) / (probs.sum(0) + 1e-8)
        loss_max = env_risk.var()
        loss_min = per_sample.mean() + self.inv_weight * loss_max \
            + self.reg_weight * self.reg_loss(user_e, pos_e, neg_e)
        return loss_min, loss_max

    def full_sort_predict(self, interaction):
        user_e = self.user_embedding(interaction[self.USER_ID])
        return torch.matmul(user_e, self.item_embedding.weight.t())


class Trainer:
    def __init__(self, config, model):
        self.config = config
        self.model = model
        self.epochs = config["epochs"]
        self.learning_rate = config["learning_rate"]
        self.clip_grad_norm = config["clip_grad_norm"]
        self.optimizer = self._build_optimizer(params=self.model.parameters())
        self.best_valid_score = -np.inf
        self.train_loss_dict = OrderedDict()

    def _build_optimizer(self, params, learning_rate=None):
        return torch.optim.Adam(params, lr=learning_rate or self.learning_rate)

    def _train_epoch(self, train_data, epoch_idx, loss_func=None):
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self, eval_data, k=10):
        self.model.eval()
        users = torch.tensor(sorted(set(eval_data.users.tolist())))
        scores = self.model.full_sort_predict(Interaction({"user_id": users}))
        topk = scores.topk(k, dim=1).indices
        hits = []
        for row, u in enumerate(users.tolist()):
            truth = set(eval_data.items[eval_data.users == u].tolist())
            hits.append(len(truth & set(topk[row].tolist())) / max(1, min(k, len(truth))))
        return float(np.mean(hits))

    def fit(self, train_data, valid_data, verbose=True):
        for epoch_idx in range(self.epochs):
            train_loss = self._train_epoch(train_data, epoch_idx)
            self.train_loss_dict[epoch_idx] = train_loss
            valid_score = self.evaluate(valid_data)
            self.best_valid_score = max(self.best_valid_score, valid_score)
            if verbose:
                print(f"epoch {epoch_idx} train loss {train_loss:.4f}  recall@10 {valid_score:.4f}")
        return self.best_valid_score


class INVTrainer(Trainer):
    def __init__(self, config, model):
        super(INVTrainer, self).__init__(config, model)
        all_params = list(self.model.parameters())
        env_generator_params = list(self.model.env_generator.parameters())
        env_ids = {id(p) for p in env_generator_params}
        model_params = [param for param in all_params if id(param) not in env_ids]
        self.optimizer_min = self._build_optimizer(params=model_params)
        self.optimizer_max = self._build_optimizer(params=env_generator_params,
                                                   learning_rate=config["env_learning_rate"])
        self.adv_every = config["adv_every"]

    def _train_epoch(self, train_data, epoch_idx, loss_func=None):
        self.model.train()
        loss_func = loss_func or self.model.calculate_loss
        total_loss = 0.0
        for batch_idx, interaction in enumerate(train_data):
            loss_min, loss_max = loss_func(interaction)
            self.optimizer_min.zero_grad()
            loss_min.backward()
            if self.clip_grad_norm:
                nn.utils.clip_grad_norm_(self.model.parameters(), **self.clip_grad_norm)
            self.optimizer_min.step()
            if (batch_idx + 1) % self.adv_every == 0:
                self.optimizer_max.zero_grad()
                _, loss_max = loss_func(interaction)
                (-loss_max).backward()
                self.optimizer_max.step()
            total_loss += loss_min.item()
        return total_loss / len(train_data)


def main():
    config = {
        "seed": 2020, "device": "cpu", "embedding_size": 16, "n_envs": 4, "inv_weight": 0.5,
        "reg_weight": 1e-4, "epochs": 2, "learning_rate": 1e-2, "env_learning_rate": 5e-3,
        "train_batch_size": 64, "clip_grad_norm": {"max_norm": 5.0}, "adv_every": 3,
    }
    dataset = {"n_users": 40, "n_items": 60}
    train_data = TrainDataLoader(config, dataset["n_users"], dataset["n_items"], n_inter=600)
    valid_data = TrainDataLoader(dict(config, seed=7), dataset["n_users"], dataset["n_items"], n_inter=120)
    model = INV(config, dataset)
    trainer = INVTrainer(config, model)
    print("best recall@10", trainer.fit(train_data, valid_data))


if __name__ == "__main__":
    main()
