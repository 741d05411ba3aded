# expect: inplace_version
# source: https://github.com/BierOne/bottom-up-attention-vqa/issues/6
"""Bottom-up / top-down attention model for visual question answering.

Image regions come as pre-extracted object features (K boxes x v_dim), the
question is encoded by a GRU over word embeddings, a question-guided attention
pools the regions, and a two-layer classifier scores the answer vocabulary with
soft (multi-label) targets.  Synthetic features / questions / answer scores.
"""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

CFG = {
    "data": {"n_train": 96, "num_objs": 10, "v_dim": 32, "q_len": 8, "ntoken": 40, "num_ans": 24},
    "model": {"emb_dim": 24, "num_hid": 32, "emb_dropout": 0.0, "att_dropout": 0.2, "cls_dropout": 0.5},
    "train": {"epochs": 2, "batch_size": 16, "grad_clip": 0.25, "seed": 1111, "log_every": 2},
}


class FCNet(nn.Module):
    """Simple class for non-linear fully connect network."""

    def __init__(self, dims, act="ReLU", dropout=0.0):
        super().__init__()
        layers = []
        for i in range(len(dims) - 1):
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            layers.append(weight_norm(nn.Linear(dims[i], dims[i + 1]), dim=None))
            if act != "":
                layers.append(getattr(nn, act)())
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x)


class WordEmbedding(nn.Module):
    def __init__(self, ntoken, emb_dim, dropout):
        super().__init__()
        self.emb = nn.Embedding(ntoken + 1, emb_dim, padding_idx=ntoken)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.emb(x))


class QuestionEmbedding(nn.Module):
    def __init__(self, in_dim, num_hid, nlayers=1, dropout=0.0):
        super().__init__()
        self.rnn = nn.GRU(in_dim, num_hid, nlayers, dropout=dropout, batch_first=True)
        self.num_hid = num_hid

    def forward(self, x):
        output, _ = self.rnn(x)
        return output[:, -1]


class NewAttention(nn.Module):
    def __init__(self, v_dim, q_dim, num_hid, dropout=0.2):
        super().__init__()
        self.v_proj = FCNet([v_dim, num_hid])
        self.q_proj = FCNet([q_dim, num_hid])
        self.dropout = nn.Dropout(dropout)
        self.linear = weight_norm(nn.Linear(num_hid, 1), dim=None)

    def logits(self, v, q):
        k = v.size(1)
        v_proj = self.v_proj(v)
        q_proj = self.q_proj(q).unsqueeze(1).repeat(1, k, 1)
        return self.linear(self.dropout(v_proj * q_proj))

    def forward(self, v, q):
        return F.softmax(self.logits(v, q), dim=1)


class SimpleClassifier(nn.Module):
    def __init__(self, in_dim, hid_dim, out_dim, dropout):
        super().__init__()
        layers = [
            weight_norm(nn.Linear(in_dim, hid_dim), dim=None),
            nn.ReLU(),
            nn.Dropout(dropout, inplace=True),
            weight_norm(nn.Linear(hid_dim, out_dim), dim=None),
        ]
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x)


class BaseModel(nn.Module):
    def __init__(self, w_emb, q_emb, v_att, q_net, v_net, classifier):
        super().__init__()
        self.w_emb, self.q_emb, self.v_att = w_emb, q_emb, v_att
        self.q_net, self.v_net, self.classifier = q_net, v_net, classifier

    def forward(self, v, q):
        w_emb = self.w_emb(q)
        q_emb = self.q_emb(w_emb)
        att = self.v_att(v, q_emb)
        v_emb = (att * v).sum(1)
        q_repr = self.q_net(q_emb)
        v_repr = self.v_net(v_emb)
        joint_repr = q_repr * v_repr
        return self.classifier(joint_repr)


def build_baseline0_newatt(cfg):
    d, m = cfg["data"], cfg["model"]
    w_emb = WordEmbedding(d["ntoken"], m["emb_dim"], m["emb_dropout"])
    q_emb = QuestionEmbedding(m["emb_dim"], m["num_hid"])
    v_att = NewAttention(d["v_dim"], q_emb.num_hid, m["num_hid"], m["att_dropout"])
    q_net = FCNet([q_emb.num_hid, m["num_hid"]])
    v_net = FCNet([d["v_dim"], m["num_hid"]])
    classifier = SimpleClassifier(m["num_hid"], m["num_hid"] * 2, d["num_ans"], m["cls_dropout"])
    return BaseModel(w_emb, q_emb, v_att, q_net, v_net, classifier)


def instance_bce_with_logits(logits, labels):
    assert logits.dim() == 2
    loss = F.binary_cross_entropy_with_logits(logits, labels)
    return loss * labels.size(1)


def compute_score_with_logits(logits, labels):
    pred = torch.max(logits, 1)[1]
    one_hots = torch.zeros_like(labels).scatter_(1, pred.view(-1, 1), 1)
    return one_hots * labels


class VQAFeatureDataset:
    """Synthetic stand-in for the cached bottom-up features + VQA soft scores."""

    def __init__(self, cfg, generator):
        d = cfg["data"]
        n = d["n_train"]
        self.features = torch.randn(n, d["num_objs"], d["v_dim"], generator=generator).relu()
        self.questions = torch.randint(0, d["ntoken"], (n, d["q_len"]), generator=generator)
        answers = torch.randint(0, d["num_ans"], (n, 3), generator=generator)
        self.targets = torch.zeros(n, d["num_ans"])
        for i in range(n):
            for rank, a in enumerate(answers[i].tolist()):
                self.targets[i, a] = max(self.targets[i, a].item(), [1.0, 0.6, 0.3][rank])

    def batches(self, batch_size, generator):
        perm = torch.randperm(len(self.features), generator=generator)
        for s in range(0, len(perm), batch_size):
            idx = perm[s:s + batch_size]
            yield self.features[idx], self.questions[idx], self.targets[idx]

    def __len__(self):
        return len(self.features)


def train(model, train_dset, cfg):
    t = cfg["train"]
    optim = torch.optim.Adamax(model.parameters())
    g = torch.Generator().manual_seed(t["seed"])
    for epoch in range(t["epochs"]):
        total_loss, train_score, t0 = 0.0, 0.0, time.time()
        model.train()
        for i, (v, q, a) in enumerate(train_dset.batches(t["batch_size"], g)):
            pred = model(v, q)
            loss = instance_bce_with_logits(pred, a)
            loss.backward()  # raises
            nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
            optim.step()
            optim.zero_grad()
            batch_score = compute_score_with_logits(pred, a.data).sum()
            total_loss += loss.item() * v.size(0)
            train_score += batch_score.item()
            if i % t["log_every"] == 0:
                print(f"epoch {epoch} iter {i} loss {loss.item():.4f}")
        total_loss /= len(train_dset)
        train_score = 100 * train_score / len(train_dset)
        print(f"epoch {epoch}, time: {time.time() - t0:.2f}")
        print(f"\ttrain_loss: {total_loss:.2f}, score: {train_score:.2f}")


def main():
    torch.manual_seed(CFG["train"]["seed"])
    train_dset = VQAFeatureDataset(CFG, torch.Generator().manual_seed(0))
    model = build_baseline0_newatt(CFG)
    train(model, train_dset, CFG)


if __name__ == "__main__":
    main()
