# expect: clean
# source: https://github.com/QueuQ/CGLB/issues/16
"""Graph-level continual learning on a Tox21-like molecular property benchmark.

A residual GCN with attention-returning graph convolutions and a weighted
sum-and-max readout learns the toxicity tasks one after another (task-IL).
Topology-aware Weight Preserving (TWP) stores loss and attention Fisher
information of each finished task and penalises drift on the next ones.
A minimal batched-graph container stands in for DGL.
"""
import numpy as np
import torch as th
from torch import nn
import torch.nn.functional as F
from torch.optim import Adam

args = {
    "seed": 0, "lr": 1e-3, "num_epochs": 2, "batch_size": 32, "n_mols": 192, "n_tasks": 4,
    "in_feats": 14, "gnn_hidden_feats": [64, 64], "predictor_hidden_feats": 64,
    "node_data_field": "h", "metric_name": "roc_auc_score",
    "twp_args": {"lambda_l": 100.0, "lambda_t": 100.0, "beta": 0.01},
}


class EdgeBatch:
    def __init__(self, g):
        self.src = {k: v[g.src] for k, v in g.ndata.items()}
        self.dst = {k: v[g.dst] for k, v in g.ndata.items()}


class fn:
    copy_src = staticmethod(lambda src, out: (lambda edges: {out: edges.src[src]}))
    sum = staticmethod(lambda msg, out: ("sum", msg, out))


class BatchedGraph:
    """Homogeneous graph (batch of molecules) with node/edge feature frames."""

    def __init__(self, src, dst, num_nodes, graph_ids, ndata=None, edata=None):
        self.src, self.dst, self.num_nodes, self.graph_ids = src, dst, num_nodes, graph_ids
        self.ndata = {} if ndata is None else ndata
        self.edata = {} if edata is None else edata

    srcdata = property(lambda self: self.ndata)
    dstdata = property(lambda self: self.ndata)
    batch_size = property(lambda self: int(self.graph_ids.max()) + 1)

    def local_var(self):
        return BatchedGraph(self.src, self.dst, self.num_nodes, self.graph_ids, dict(self.ndata), dict(self.edata))

    in_degrees = lambda self: th.bincount(self.dst, minlength=self.num_nodes)
    out_degrees = lambda self: th.bincount(self.src, minlength=self.num_nodes)

    def apply_edges(self, func):
        self.edata.update(func(EdgeBatch(self)))

    def update_all(self, message_func, reduce_func):
        _, msg, out = reduce_func
        m = message_func(EdgeBatch(self))[msg]
        self.ndata[out] = th.zeros((self.num_nodes,) + m.shape[1:], dtype=m.dtype).index_add(0, self.dst, m)


def edge_softmax(graph, e):
    emax = th.full((graph.num_nodes,), float("-inf")).scatter_reduce(0, graph.dst, e, "amax")
    ex = th.exp(e - emax[graph.dst])
    return ex / th.zeros(graph.num_nodes).index_add(0, graph.dst, ex)[graph.dst]


class GraphConv(nn.Module):
    def __init__(self, in_feats, out_feats, norm="both", activation=None):
        super().__init__()
        self._in_feats, self._out_feats, self._norm = in_feats, out_feats, norm
        self.weight = nn.Parameter(th.Tensor(in_feats, out_feats))
        self.bias = nn.Parameter(th.Tensor(out_feats))
        self.reset_parameters()
        self._activation = activation
        self.leaky_relu = nn.LeakyReLU(0.2)

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, graph, feat, weight=None):
        graph = graph.local_var()
        if self._norm == "both":
            norm = th.pow(graph.out_degrees().float().clamp(min=1), -0.5)
            feat = feat * norm.reshape(-1, 1)
        weight = self.weight if weight is None else weight

        if self._in_feats > self._out_feats:
            # mult W first to reduce the feature size for aggregation.
            if weight is not None:
                feat = th.matmul(feat, weight)
            graph.srcdata["h"] = feat
            graph.ndata["feat"] = feat
            graph.apply_edges(lambda edges: {"e": th.sum((th.mul(edges.src["h"], th.tanh(edges.dst["h"]))), 1)})
            e = self.leaky_relu(graph.edata.pop("e"))
            e_soft = edge_softmax(graph, e)
            graph.ndata.pop("feat")
            graph.update_all(fn.copy_src(src="h", out="m"), fn.sum(msg="m", out="h"))
            rst = graph.dstdata["h"]
        else:
            # aggregate first then mult W
            graph.srcdata["h"] = feat
            graph.ndata["feat"] = th.matmul(feat, weight) if weight is not None else feat
            graph.apply_edges(lambda edges: {"e": th.sum((th.mul(edges.src["feat"], th.tanh(edges.dst["feat"]))), 1)})
            e = self.leaky_relu(graph.edata.pop("e"))
            e_soft = edge_softmax(graph, e)
            graph.ndata.pop("feat")
            graph.update_all(fn.copy_src(src="h", out="m"), fn.sum(msg="m", out="h"))
            rst = graph.dstdata["h"]
            if weight is not None:
                rst = th.matmul(rst, weight)

        if self._norm != "none":
            degs = graph.in_degrees().float().clamp(min=1)
            norm = th.pow(degs, -0.5) if self._norm == "both" else 1.0 / degs
            rst = rst * norm.reshape(-1, 1)
        rst = rst + self.bias
        if self._activation is not None:
            rst = self._activation(rst)
        return rst, e_soft


class GCNLayer(nn.Module):
    def __init__(self, in_feats, out_feats, activation=F.relu, dropout=0.0):
        super().__init__()
        self.activation = activation
        self.graph_conv = GraphConv(in_feats, out_feats, norm="none", activation=activation)
        self.dropout = nn.Dropout(dropout)
        self.res_connection = nn.Linear(in_feats, out_feats)
        self.bn_layer = nn.BatchNorm1d(out_feats)

    def forward(self, g, feats):
        new_feats, att = self.graph_conv(g, feats)
        new_feats = new_feats + self.activation(self.res_connection(feats))
        return self.bn_layer(self.dropout(new_feats)), att


class GCNPredictor(nn.Module):
    def __init__(self, in_feats, hidden_feats, n_tasks, predictor_hidden_feats):
        super().__init__()
        dims = [in_feats] + hidden_feats
        self.gnn_layers = nn.ModuleList([GCNLayer(dims[i], dims[i + 1]) for i in range(len(hidden_feats))])
        self.atom_weighting = nn.Sequential(nn.Linear(hidden_feats[-1], 1), nn.Sigmoid())
        self.predict = nn.Sequential(nn.Linear(2 * hidden_feats[-1], predictor_hidden_feats), nn.ReLU(),
                                     nn.BatchNorm1d(predictor_hidden_feats),
                                     nn.Linear(predictor_hidden_feats, n_tasks))

    def readout(self, g, feats):
        gid, B = g.graph_ids, g.batch_size
        h_sum = th.zeros(B, feats.size(1)).index_add(0, gid, feats * self.atom_weighting(feats))
        h_max = th.full((B, feats.size(1)), float("-inf")).scatter_reduce(
            0, gid.unsqueeze(1).expand_as(feats), feats, "amax")
        return th.cat([h_sum, h_max], dim=1)

    def forward(self, g, feats):
        att = []
        for gnn in self.gnn_layers:
            feats, e = gnn(g, feats)
            att.append(e)
        return self.predict(self.readout(g, feats)), att


def predict(args, model, bg):
    node_feats = bg.ndata.pop(args["node_data_field"])
    return model(bg, node_feats)


class NET(nn.Module):
    """TWP baseline for GCGL tasks."""

    def __init__(self, model, args):
        super().__init__()
        self.net = model
        self.optimizer = Adam(model.parameters(), lr=args["lr"])
        self.current_task = 0
        self.fisher_loss, self.fisher_att, self.optpar = {}, {}, {}
        self.data_loader = None
        self.lambda_l = args["twp_args"]["lambda_l"]
        self.lambda_t = args["twp_args"]["lambda_t"]
        self.beta = args["twp_args"]["beta"]

    def forward(self, g):
        return predict(args, self.net, g)

    def observe(self, data_loader, loss_criterion, task_i, args):
        self.net.train()
        if task_i != self.current_task:
            self.optimizer.zero_grad()
            self.fisher_loss[self.current_task] = []
            self.fisher_att[self.current_task] = []
            self.optpar[self.current_task] = []
            for batch_id, (bg, labels, masks) in enumerate(self.data_loader()):
                logits, elist = predict(args, self.net, bg)
                loss = loss_criterion(logits, labels) * (masks != 0).float()
                loss = loss[:, self.current_task].mean()
                loss.backward(retain_graph=True)
                for p in self.net.parameters():
                    if p.grad is not None:
                        self.fisher_loss[self.current_task].append(p.grad.data.clone().pow(2))
                        self.optpar[self.current_task].append(p.data.clone())
                eloss = th.norm(elist[0]) if isinstance(elist, list) else elist
                eloss.backward()
                for p in self.net.parameters():
                    if p.grad is not None:
                        self.fisher_att[self.current_task].append(p.grad.data.clone().pow(2))
            self.current_task = task_i

        for batch_id, (bg, labels, masks) in enumerate(data_loader()):
            logits, elist = predict(args, self.net, bg)
            loss = loss_criterion(logits, labels) * (masks != 0).float()
            loss = loss[:, task_i].mean()
            loss.backward(retain_graph=True)
            grad_norm = sum(th.norm(p.grad.data.clone(), p=1) for p in self.net.parameters() if p.grad is not None)
            for tt in range(task_i):
                params = [p for p in self.net.parameters() if p.grad is not None]
                for i, p in enumerate(params):
                    l = self.lambda_l * self.fisher_loss[tt][i] + self.lambda_t * self.fisher_att[tt][i]
                    loss += (l * (p - self.optpar[tt][i]).pow(2)).sum()
            loss = loss + self.beta * grad_norm
            loss.backward()
            self.optimizer.step()


def roc_auc(y, s):
    pos, neg = s[y == 1], s[y == 0]
    if len(pos) == 0 or len(neg) == 0:
        return 0.5
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


def make_molecules(n, rng):
    mols = []
    for _ in range(n):
        k = int(rng.integers(6, 15))
        bonds = [(i, i + 1) for i in range(k - 1)] + [(int(a), int(b)) for a, b in rng.integers(0, k, (2, 2)) if a != b]
        atoms = rng.choice(8, size=k, p=[.55, .15, .12, .06, .04, .04, .02, .02])
        deg = np.bincount(np.array(bonds).ravel(), minlength=k).clip(max=4)
        x = np.concatenate([np.eye(8)[atoms], np.eye(5)[deg], (rng.random((k, 1)) < 0.3)], 1)
        counts = np.bincount(atoms, minlength=8)
        y = np.array([counts[1] > 2, counts[2] > 1, counts[3:].sum() > 1, k > 10], dtype=np.float32)
        mols.append((x.astype(np.float32), bonds, y, (rng.random(4) > 0.1).astype(np.float32)))
    return mols


def collate(batch):
    src, dst, feats, gids, off = [], [], [], [], 0
    for gi, (x, bonds, _, _) in enumerate(batch):
        for a, b in bonds:
            src += [a + off, b + off]
            dst += [b + off, a + off]
        feats.append(th.from_numpy(x))
        gids += [gi] * len(x)
        off += len(x)
    g = BatchedGraph(th.tensor(src), th.tensor(dst), off, th.tensor(gids))
    g.ndata["h"] = th.cat(feats)
    return g, th.tensor(np.stack([m[2] for m in batch])), th.tensor(np.stack([m[3] for m in batch]))


class Runner:
    def __init__(self, args):
        self.args = args
        rng = np.random.default_rng(args["seed"])
        self.train_set, self.test_set = make_molecules(args["n_mols"], rng), make_molecules(64, rng)
        net = GCNPredictor(args["in_feats"], args["gnn_hidden_feats"], args["n_tasks"], args["predictor_hidden_feats"])
        self.model = NET(net, args)
        self.loss_criterion = nn.BCEWithLogitsLoss(reduction="none")

    def loader(self, data, shuffle=True):
        bs, order = self.args["batch_size"], np.random.permutation(len(data)) if shuffle else np.arange(len(data))
        return lambda: (collate([data[i] for i in order[s:s + bs]]) for s in range(0, len(data), bs))

    @th.no_grad()
    def evaluate(self, task_i):
        self.model.net.eval()
        g, labels, masks = collate(self.test_set)
        logits, _ = self.model(g)
        keep = masks[:, task_i] != 0
        return roc_auc(labels[keep, task_i].numpy(), logits[keep, task_i].numpy())

    def run(self):
        for task_i in range(self.args["n_tasks"]):
            train_loader = self.loader(self.train_set)
            for epoch in range(self.args["num_epochs"]):
                self.model.observe(train_loader, self.loss_criterion, task_i, self.args)
            self.model.data_loader = train_loader
            print(f"task {task_i}: " + ", ".join(f"{self.evaluate(t):.3f}" for t in range(task_i + 1)))


def main():
    th.manual_seed(args["seed"])
    np.random.seed(args["seed"])
    Runner(args).run()


if __name__ == "__main__":
    main()
