# expect: numpy_requires_grad
# source: https://github.com/xiaxin1998/DHCN/issues/8
import math
import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import Module


@dataclass
class Config:
    n_node: int = 40
    emb_size: int = 16
    batch_size: int = 8
    layers: int = 2
    beta: float = 0.01
    lr: float = 1e-3
    l2: float = 1e-5
    epochs: int = 2
    max_len: int = 6
    n_sessions: int = 48
    topk: tuple = (5, 10)


def trans_to_cuda(variable):
    if torch.cuda.is_available():
        return variable.cuda()
    return variable


def make_sessions(cfg, seed=0):
    rng = random.Random(seed)
    sessions, targets = [], []
    for _ in range(cfg.n_sessions):
        length = rng.randint(2, cfg.max_len)
        start = rng.randint(1, cfg.n_node - 1)
        seq = [((start + 3 * k) % (cfg.n_node - 1)) + 1 for k in range(length)]
        sessions.append(seq[:-1])
        targets.append(seq[-1])
    return sessions, targets


def build_hypergraph(sessions, n_node):
    H = np.zeros((n_node - 1, len(sessions)), dtype=np.float32)
    for e, sess in enumerate(sessions):
        for item in sess:
            H[item - 1, e] = 1.0
    deg_v = H.sum(1)
    deg_e = H.sum(0)
    deg_v[deg_v == 0] = 1.0
    deg_e[deg_e == 0] = 1.0
    adj = (H / deg_v[:, None]) @ (H / deg_e[None, :]).T
    idx = np.vstack(np.nonzero(adj))
    vals = adj[adj != 0]
    return torch.sparse_coo_tensor(torch.from_numpy(idx).long(), torch.from_numpy(vals), adj.shape, check_invariants=True).coalesce()


class Data:
    def __init__(self, sessions, targets, cfg, shuffle=False):
        self.sessions = sessions
        self.targets = np.asarray(targets)
        self.cfg = cfg
        self.shuffle = shuffle
        self.length = len(sessions)

    def generate_batch(self, batch_size):
        order = np.arange(self.length)
        if self.shuffle:
            np.random.shuffle(order)
        n_batch = self.length // batch_size
        return [order[i * batch_size:(i + 1) * batch_size] for i in range(n_batch)]

    def get_overlap(self, sessions):
        n = len(sessions)
        matrix = np.zeros((n, n), dtype=np.float32)
        for i in range(n):
            a = set(sessions[i])
            for j in range(i + 1, n):
                b = set(sessions[j])
                overlap = len(a & b) / max(len(a | b), 1)
                matrix[i, j] = matrix[j, i] = overlap
        matrix = matrix + np.eye(n, dtype=np.float32)
        degree = np.diag(1.0 / matrix.sum(1))
        return matrix, degree

    def get_slice(self, index):
        sess = [self.sessions[i] for i in index]
        max_n = max(len(s) for s in sess)
        session_item = np.zeros((len(sess), max_n), dtype=np.int64)
        reversed_item = np.zeros((len(sess), max_n), dtype=np.int64)
        mask = np.zeros((len(sess), max_n), dtype=np.float32)
        for k, s in enumerate(sess):
            session_item[k, :len(s)] = s
            reversed_item[k, :len(s)] = list(reversed(s))
            mask[k, :len(s)] = 1.0
        lens = np.array([[len(s)] for s in sess], dtype=np.float32)
        return self.targets[index] - 1, lens, session_item, reversed_item, mask, sess


class HyperConv(Module):
    def __init__(self, layers, emb_size=100):
        super().__init__()
        self.emb_size = emb_size
        self.layers = layers

    def forward(self, adjacency, embedding):
        item_embeddings = embedding
        final = [item_embeddings]
        for _ in range(self.layers):
            item_embeddings = torch.sparse.mm(trans_to_cuda(adjacency), item_embeddings)
            final.append(item_embeddings)
        item_embeddings = np.sum(final, 0)  # raises
        return item_embeddings


class LineConv(Module):
    def __init__(self, layers, emb_size=100):
        super().__init__()
        self.emb_size = emb_size
        self.layers = layers

    def forward(self, item_embedding, D, A, session_item, session_len):
        zeros = torch.zeros(1, self.emb_size)
        item_embedding = torch.cat([zeros, item_embedding], 0)
        seq_h = torch.stack([item_embedding[s] for s in session_item])
        session_emb = torch.div(torch.sum(seq_h, 1), session_len)
        session = [session_emb]
        DA = torch.mm(D, A).float()
        for _ in range(self.layers):
            session_emb = torch.mm(DA, session_emb)
            session.append(session_emb)
        return torch.stack(session).sum(0)


class DHCN(Module):
    def __init__(self, adjacency, cfg):
        super().__init__()
        self.cfg = cfg
        self.emb_size = cfg.emb_size
        self.adjacency = adjacency
        self.embedding = nn.Embedding(cfg.n_node, cfg.emb_size)
        self.pos_embedding = nn.Embedding(200, cfg.emb_size)
        self.HyperGraph = HyperConv(cfg.layers, cfg.emb_size)
        self.LineGraph = LineConv(cfg.layers, cfg.emb_size)
        self.w_1 = nn.Parameter(torch.Tensor(2 * cfg.emb_size, cfg.emb_size))
        self.w_2 = nn.Parameter(torch.Tensor(cfg.emb_size, 1))
        self.glu1 = nn.Linear(cfg.emb_size, cfg.emb_size)
        self.glu2 = nn.Linear(cfg.emb_size, cfg.emb_size, bias=False)
        self.loss_function = nn.CrossEntropyLoss()
        self.init_parameters()
        self.optimizer = torch.optim.Adam(self.parameters(), lr=cfg.lr, weight_decay=cfg.l2)

    def init_parameters(self):
        stdv = 1.0 / math.sqrt(self.emb_size)
        for weight in self.parameters():
            weight.data.uniform_(-stdv, stdv)

    def generate_sess_emb(self, item_embedding, session_len, reversed_sess_item, mask):
        zeros = torch.zeros(1, self.emb_size)
        item_embedding = torch.cat([zeros, item_embedding], 0)
        seq_h = item_embedding[reversed_sess_item]
        hs = torch.div(torch.sum(seq_h, 1), session_len)
        mask = mask.float().unsqueeze(-1)
        length = seq_h.shape[1]
        pos_emb = self.pos_embedding.weight[:length].unsqueeze(0).repeat(seq_h.shape[0], 1, 1)
        hs = hs.unsqueeze(-2).repeat(1, length, 1)
        nh = torch.tanh(torch.matmul(torch.cat([pos_emb, seq_h], -1), self.w_1))
        nh = torch.sigmoid(self.glu1(nh) + self.glu2(hs))
        beta = torch.matmul(nh, self.w_2) * mask
        return torch.sum(beta * seq_h, 1)

    def SSL(self, sess_emb_hgnn, sess_emb_lgcn):
        def row_column_shuffle(embedding):
            corrupted = embedding[torch.randperm(embedding.size(0))]
            return corrupted[:, torch.randperm(corrupted.size(1))]

        def score(x1, x2):
            return torch.sum(torch.mul(x1, x2), 1)

        pos = score(sess_emb_hgnn, sess_emb_lgcn)
        neg1 = score(sess_emb_lgcn, row_column_shuffle(sess_emb_hgnn))
        one = torch.ones(neg1.shape[0])
        return torch.sum(-torch.log(1e-8 + torch.sigmoid(pos)) - torch.log(1e-8 + (one - torch.sigmoid(neg1))))

    def forward(self, session_item, session_len, D, A, reversed_sess_item, mask):
        item_embeddings_hg = self.HyperGraph(self.adjacency, self.embedding.weight[1:])
        sess_emb_hgnn = self.generate_sess_emb(item_embeddings_hg, session_len, reversed_sess_item, mask)
        session_emb_lg = self.LineGraph(self.embedding.weight[1:], D, A, session_item, session_len)
        con_loss = self.SSL(sess_emb_hgnn, session_emb_lg)
        return item_embeddings_hg, sess_emb_hgnn, self.cfg.beta * con_loss


def forward(model, index, data):
    tar, session_len, session_item, reversed_item, mask, _ = data.get_slice(index)
    A_hat, D_hat = data.get_overlap([list(s[s > 0]) for s in session_item])
    session_item = torch.from_numpy(session_item)
    item_emb_hg, sess_emb_hgnn, con_loss = model(
        session_item, torch.from_numpy(session_len), torch.from_numpy(D_hat), torch.from_numpy(A_hat),
        torch.from_numpy(reversed_item), torch.from_numpy(mask))
    scores = torch.mm(sess_emb_hgnn, torch.transpose(item_emb_hg, 1, 0))
    return torch.from_numpy(tar).long(), scores, con_loss


def train_test(model, train_data, test_data, cfg):
    model.train()
    total_loss = 0.0
    for index in train_data.generate_batch(cfg.batch_size):
        model.zero_grad()
        targets, scores, con_loss = forward(model, index, train_data)
        loss = model.loss_function(scores, targets) + con_loss
        loss.backward()
        model.optimizer.step()
        total_loss += loss.item()
    model.eval()
    metrics = {k: [] for k in cfg.topk}
    with torch.no_grad():
        for index in test_data.generate_batch(cfg.batch_size):
            targets, scores, _ = forward(model, index, test_data)
            for k in cfg.topk:
                top = scores.topk(k, dim=1).indices
                metrics[k].extend((top == targets[:, None]).any(1).float().tolist())
    return total_loss, {k: float(np.mean(v)) for k, v in metrics.items()}


def main():
    cfg = Config()
    torch.manual_seed(0)
    np.random.seed(0)
    sessions, targets = make_sessions(cfg)
    split = int(0.75 * len(sessions))
    train_data = Data(sessions[:split], targets[:split], cfg, shuffle=True)
    test_data = Data(sessions[split:], targets[split:], cfg)
    adjacency = build_hypergraph(sessions[:split], cfg.n_node)
    model = trans_to_cuda(DHCN(adjacency, cfg))
    for epoch in range(cfg.epochs):
        loss, hits = train_test(model, train_data, test_data, cfg)
        print(f"epoch {epoch}: loss={loss:.3f} " + " ".join(f"P@{k}={v:.3f}" for k, v in hits.items()))


if __name__ == "__main__":
    main()
