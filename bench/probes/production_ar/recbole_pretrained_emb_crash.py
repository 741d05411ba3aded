# expect: no_grad_fn
# source: https://github.com/RUCAIBox/RecBole/issues/2027
"""Session-based next-item recommendation with preloaded item embeddings.

RecBole-style pipeline in one file: a Config dict, an interaction dataset that
exposes preloaded item vectors (``get_preload_weight``), a SequentialRecommender
base class, a "dummy" sequential model that pools the pretrained embeddings of
the item sequence, and a Trainer with _train_epoch / _valid_epoch, early stopping
and full-sort Recall@K / NDCG@K evaluation.  All data are synthetic.
"""
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn


class Config(dict):
    DEFAULTS = {
        "seed": 2020,
        "n_items": 50,
        "embedding_size": 16,
        "MAX_ITEM_LIST_LENGTH": 8,
        "train_batch_size": 32,
        "eval_batch_size": 64,
        "epochs": 3,
        "learning_rate": 0.01,
        "stopping_step": 2,
        "topk": [5, 10],
        "valid_metric": "ndcg@10",
        "loss_type": "CE",
        "pooling": "mean",
    }

    def __init__(self, **overrides):
        super().__init__(self.DEFAULTS)
        self.update(overrides)

    def __getattr__(self, key):
        return self[key]


class SequentialDataset:
    """Synthetic item sequences plus preloaded item feature vectors."""

    def __init__(self, config, n_sessions):
        rng = np.random.RandomState(config["seed"])
        self.n_items = config["n_items"]
        L = config["MAX_ITEM_LIST_LENGTH"]
        self.item_seq = np.zeros((n_sessions, L), dtype=np.int64)
        self.item_seq_len = rng.randint(2, L + 1, size=n_sessions)
        self.pos_items = np.zeros(n_sessions, dtype=np.int64)
        for s in range(n_sessions):
            start = rng.randint(1, self.n_items)
            step = rng.randint(1, 4)
            seq = [(start + k * step) % (self.n_items - 1) + 1 for k in range(self.item_seq_len[s] + 1)]
            self.item_seq[s, :self.item_seq_len[s]] = seq[:-1]
            self.pos_items[s] = seq[-1]
        self._preload = {"iid": rng.normal(0, 0.1, (self.n_items, config["embedding_size"])).astype(np.float32)}
        self._preload["iid"][0] = 0.0  # padding item

    def get_preload_weight(self, field):
        return self._preload[field]

    def split(self, ratios=(0.8, 0.2)):
        n = len(self.pos_items)
        cut = int(n * ratios[0])
        return [self._slice(slice(0, cut)), self._slice(slice(cut, n))]

    def _slice(self, sl):
        return {
            "item_id_list": torch.from_numpy(self.item_seq[sl]),
            "item_length": torch.from_numpy(self.item_seq_len[sl]),
            "item_id": torch.from_numpy(self.pos_items[sl]),
        }


class DataLoader:
    def __init__(self, inter, batch_size, shuffle=False, seed=0):
        self.inter = inter
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.inter["item_id"]) / self.batch_size)

    def __iter__(self):
        n = len(self.inter["item_id"])
        order = torch.randperm(n, generator=self.gen) if self.shuffle else torch.arange(n)
        for i in range(0, n, self.batch_size):
            idx = order[i:i + self.batch_size]
            yield {k: v[idx] for k, v in self.inter.items()}


class SequentialRecommender(nn.Module):
    def __init__(self, config, dataset):
        super().__init__()
        self.ITEM_SEQ = "item_id_list"
        self.ITEM_SEQ_LEN = "item_length"
        self.POS_ITEM_ID = "item_id"
        self.max_seq_length = config["MAX_ITEM_LIST_LENGTH"]
        self.n_items = dataset.n_items

    def gather_indexes(self, output, gather_index):
        gather_index = gather_index.view(-1, 1, 1).expand(-1, -1, output.shape[-1])
        return output.gather(dim=1, index=gather_index).squeeze(1)

    def other_parameter(self):
        return {}


class DummyModel(SequentialRecommender):
    """Scores the next item with the pooled pretrained item embeddings."""

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.pooling = config["pooling"]
        pretrained_item_emb = dataset.get_preload_weight("iid")
        self.item_embedding = nn.Embedding.from_pretrained(torch.from_numpy(pretrained_item_emb))
        self.loss_fct = nn.CrossEntropyLoss()

    def forward(self, item_seq, item_seq_len):
        item_emb = self.item_embedding(item_seq)
        if self.pooling == "last":
            return self.gather_indexes(item_emb, item_seq_len - 1)
        mask = (item_seq > 0).unsqueeze(-1).float()
        return (item_emb * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    def calculate_loss(self, interaction):
        seq_output = self.forward(interaction[self.ITEM_SEQ], interaction[self.ITEM_SEQ_LEN])
        logits = torch.matmul(seq_output, self.item_embedding.weight.transpose(0, 1))
        return self.loss_fct(logits, interaction[self.POS_ITEM_ID])

    def full_sort_predict(self, interaction):
        seq_output = self.forward(interaction[self.ITEM_SEQ], interaction[self.ITEM_SEQ_LEN])
        return torch.matmul(seq_output, self.item_embedding.weight.transpose(0, 1))


def early_stopping(value, best, cur_step, max_step):
    stop_flag, update_flag = False, False
    if value >= best:
        cur_step, best, update_flag = 0, value, True
    else:
        cur_step += 1
        stop_flag = cur_step > max_step
    return best, cur_step, stop_flag, update_flag


class Evaluator:
    def __init__(self, topk):
        self.topk = topk

    def evaluate(self, scores, pos_items):
        maxk = max(self.topk)
        scores[:, 0] = -np.inf  # never recommend padding
        topk_idx = torch.topk(scores, maxk, dim=-1).indices
        hits = (topk_idx == pos_items.unsqueeze(1)).float()
        result = OrderedDict()
        for k in self.topk:
            h = hits[:, :k]
            result[f"recall@{k}"] = h.sum(1).mean().item()
            ranks = torch.arange(1, k + 1, dtype=torch.float)
            result[f"ndcg@{k}"] = (h / torch.log2(ranks + 1)).sum(1).mean().item()
        return result


class Trainer:
    def __init__(self, config, model):
        self.config = config
        self.model = model
        self.epochs = config["epochs"]
        self.stopping_step = config["stopping_step"]
        self.valid_metric = config["valid_metric"]
        self.optimizer = self._build_optimizer()
        self.evaluator = Evaluator(config["topk"])
        self.best_valid_score = -np.inf
        self.best_valid_result = None
        self.cur_step = 0

    def _build_optimizer(self):
        params = self.model.parameters()
        return torch.optim.Adam(params, lr=self.config["learning_rate"])

    def _train_epoch(self, train_data, epoch_idx):
        self.model.train()
        total_loss = 0.0
        for batch_idx, interaction in enumerate(train_data):
            self.optimizer.zero_grad()
            loss = self.model.calculate_loss(interaction)
            total_loss += loss.item()
            loss.backward()  # raises
            self.optimizer.step()
        return total_loss / len(train_data)

    @torch.no_grad()
    def evaluate(self, eval_data):
        self.model.eval()
        scores, pos = [], []
        for interaction in eval_data:
            scores.append(self.model.full_sort_predict(interaction))
            pos.append(interaction["item_id"])
        return self.evaluator.evaluate(torch.cat(scores), torch.cat(pos))

    def _valid_epoch(self, valid_data):
        result = self.evaluate(valid_data)
        return result[self.valid_metric], result

    def fit(self, train_data, valid_data):
        for epoch_idx in range(self.epochs):
            train_loss = self._train_epoch(train_data, epoch_idx)
            valid_score, valid_result = self._valid_epoch(valid_data)
            self.best_valid_score, self.cur_step, stop_flag, update_flag = early_stopping(
                valid_score, self.best_valid_score, self.cur_step, self.stopping_step)
            if update_flag:
                self.best_valid_result = valid_result
            print(f"epoch {epoch_idx} train loss {train_loss:.4f} valid {dict(valid_result)}")
            if stop_flag:
                break
        return self.best_valid_score, self.best_valid_result


def init_seed(seed):
    np.random.seed(seed)
    torch.manual_seed(seed)


def main():
    config = Config()
    init_seed(config["seed"])
    dataset = SequentialDataset(config, n_sessions=200)
    train_inter, valid_inter = dataset.split()
    train_data = DataLoader(train_inter, config["train_batch_size"], shuffle=True, seed=config["seed"])
    valid_data = DataLoader(valid_inter, config["eval_batch_size"])

    model = DummyModel(config, dataset)
    trainer = Trainer(config, model)
    best_valid_score, best_valid_result = trainer.fit(train_data, valid_data)
    print("best valid", best_valid_score, best_valid_result)


if __name__ == "__main__":
    main()
