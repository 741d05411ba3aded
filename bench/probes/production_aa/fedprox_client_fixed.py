# expect: clean
# source: https://github.com/flwrlabs/flower/issues/1774
"""Federated learning simulation with a FedProx strategy (Flower-style clients).

Clients follow the Flower NumPyClient protocol (get_parameters / fit /
evaluate exchange lists of NumPy arrays), train locally with the FedProx
proximal term from the strategy's `proximal_mu`, and a small in-process
server samples clients, aggregates their weights with a sample-weighted
average and evaluates the global model.  Client data are non-IID synthetic
blobs.
"""
from collections import OrderedDict
from typing import Dict, List, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NDArrays = List[np.ndarray]
CONFIG = {
    "num_clients": 4,
    "num_rounds": 2,
    "fraction_fit": 0.75,
    "local_epochs": 1,
    "batch_size": 16,
    "lr": 0.05,
    "proximal_mu": 0.1,
    "seed": 7,
}


class Net(nn.Module):
    def __init__(self, in_dim=10, hidden=32, num_classes=3):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def make_client_data(cid, n=64, seed=0):
    rng = np.random.RandomState(seed + cid)
    centers = rng.randn(3, 10) * 2.0
    labels = rng.choice(3, size=n, p=np.roll([0.6, 0.3, 0.1], cid))
    x = centers[labels] + rng.randn(n, 10)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(labels)


def batches(x, y, batch_size, shuffle=True, seed=0):
    idx = np.random.RandomState(seed).permutation(len(x)) if shuffle else np.arange(len(x))
    for i in range(0, len(x), batch_size):
        j = idx[i:i + batch_size]
        yield x[j], y[j]


def get_parameters(net) -> NDArrays:
    return [val.cpu().numpy() for _, val in net.state_dict().items()]


def set_parameters(net, parameters: NDArrays):
    params_dict = zip(net.state_dict().keys(), parameters)
    state_dict = OrderedDict({k: torch.tensor(v) for k, v in params_dict})
    net.load_state_dict(state_dict, strict=True)


def train(net, trainloader, epochs, lr, proximal_mu, global_params):
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    total = 0.0
    for epoch in range(epochs):
        for images, labels in trainloader():
            optimizer.zero_grad()
            proximal_term = 0.0
            for local_weights, global_weights in zip(net.parameters(), global_params):
                proximal_term += (local_weights.detach() - global_weights).norm(2)
            loss = criterion(net(images), labels) + (proximal_mu / 2) * proximal_term
            loss.backward()
            optimizer.step()
            total += loss.item()
    return total


def test(net, testloader):
    criterion = nn.CrossEntropyLoss(reduction="sum")
    correct, loss, n = 0, 0.0, 0
    net.eval()
    with torch.no_grad():
        for images, labels in testloader():
            outputs = net(images)
            loss += criterion(outputs, labels).item()
            correct += (outputs.argmax(1) == labels).sum().item()
            n += len(labels)
    return loss / n, correct / n


class FlowerClient(object):
    def __init__(self, cid, net, data):
        self.cid = cid
        self.net = net
        self.x, self.y = data

    def get_parameters(self, config) -> NDArrays:
        return get_parameters(self.net)

    def fit(self, parameters: NDArrays, config: Dict) -> Tuple[NDArrays, int, Dict]:
        set_parameters(self.net, parameters)
        loader = lambda: batches(self.x, self.y, config["batch_size"], seed=config["server_round"])
        train(self.net, loader, epochs=config["local_epochs"], lr=config["lr"],
              proximal_mu=config["proximal_mu"], global_params=parameters)
        return get_parameters(self.net), len(self.x), {}

    def evaluate(self, parameters: NDArrays, config: Dict):
        set_parameters(self.net, parameters)
        loss, acc = test(self.net, lambda: batches(self.x, self.y, 64, shuffle=False))
        return float(loss), len(self.x), {"accuracy": float(acc)}


def client_fn(cid) -> FlowerClient:
    return FlowerClient(cid, Net(), make_client_data(cid, seed=CONFIG["seed"]))


class FedProx(object):
    def __init__(self, fraction_fit, proximal_mu, initial_parameters):
        self.fraction_fit = fraction_fit
        self.proximal_mu = proximal_mu
        self.parameters = initial_parameters

    def configure_fit(self, server_round, client_ids, rng):
        k = max(1, int(self.fraction_fit * len(client_ids)))
        chosen = rng.choice(client_ids, size=k, replace=False)
        cfg = {"server_round": server_round, "local_epochs": CONFIG["local_epochs"],
               "batch_size": CONFIG["batch_size"], "lr": CONFIG["lr"], "proximal_mu": self.proximal_mu}
        return [(int(c), cfg) for c in chosen]

    def aggregate_fit(self, results):
        num_examples_total = sum(n for _, n in results)
        weighted = [[layer * n for layer in weights] for weights, n in results]
        self.parameters = [np.sum(layers, axis=0) / num_examples_total for layers in zip(*weighted)]
        return self.parameters

    def aggregate_evaluate(self, results):
        total = sum(n for _, n, _ in results)
        return sum(l * n for l, n, _ in results) / total, sum(m["accuracy"] * n for _, n, m in results) / total


def start_simulation(num_clients, num_rounds, strategy):
    rng = np.random.RandomState(CONFIG["seed"])
    history = []
    for server_round in range(1, num_rounds + 1):
        fit_ins = strategy.configure_fit(server_round, list(range(num_clients)), rng)
        results = []
        for cid, cfg in fit_ins:
            params, n, _ = client_fn(cid).fit([p.copy() for p in strategy.parameters], cfg)
            results.append((params, n))
        strategy.aggregate_fit(results)
        evals = [client_fn(c).evaluate(strategy.parameters, {}) for c in range(num_clients)]
        loss, acc = strategy.aggregate_evaluate(evals)
        history.append((server_round, loss, acc))
        print("round %d  loss %.4f  acc %.3f" % (server_round, loss, acc))
    return history


def main():
    torch.manual_seed(CONFIG["seed"])
    strategy = FedProx(CONFIG["fraction_fit"], CONFIG["proximal_mu"], get_parameters(Net()))
    start_simulation(CONFIG["num_clients"], CONFIG["num_rounds"], strategy)


if __name__ == "__main__":
    main()
