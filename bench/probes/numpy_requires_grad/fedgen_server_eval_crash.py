# expect: numpy_requires_grad
# source: https://github.com/zhuangdizhu/FedGen/issues/1
import argparse
import copy
import logging

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("fedavg")


def get_args():
    parser = argparse.ArgumentParser(description="Federated learning on synthetic MNIST-like data")
    parser.add_argument("--dataset", type=str, default="Synth-alpha0.1-ratio0.5")
    parser.add_argument("--algorithm", type=str, default="FedAvg")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_glob_iters", type=int, default=3)
    parser.add_argument("--local_epochs", type=int, default=2)
    parser.add_argument("--num_users", type=int, default=5)
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def make_federated_data(num_users, alpha, seed, n_per_user=120, dim=64, num_classes=10):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_classes, dim)).astype(np.float32)
    users = []
    for _ in range(num_users):
        label_dist = rng.dirichlet(alpha * np.ones(num_classes))
        labels = rng.choice(num_classes, size=n_per_user, p=label_dist)
        feats = centers[labels] + 0.8 * rng.normal(size=(n_per_user, dim)).astype(np.float32)
        split = int(0.75 * n_per_user)
        users.append({
            "train": (torch.from_numpy(feats[:split]), torch.from_numpy(labels[:split]).long()),
            "test": (torch.from_numpy(feats[split:]), torch.from_numpy(labels[split:]).long()),
        })
    return users


class Net(nn.Module):
    def __init__(self, dim=64, hidden=64, num_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class User:
    def __init__(self, user_id, data, model, args):
        self.id = user_id
        self.train_x, self.train_y = data["train"]
        self.test_x, self.test_y = data["test"]
        self.model = copy.deepcopy(model)
        self.batch_size = args.batch_size
        self.local_epochs = args.local_epochs
        self.loss = nn.NLLLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.learning_rate)

    def set_parameters(self, model):
        for old, new in zip(self.model.parameters(), model.parameters()):
            old.data = new.data.clone()

    def train(self):
        self.model.train()
        n = self.train_x.shape[0]
        for _ in range(self.local_epochs):
            perm = torch.randperm(n)
            for i in range(0, n, self.batch_size):
                idx = perm[i:i + self.batch_size]
                self.optimizer.zero_grad()
                loss = self.loss(self.model(self.train_x[idx]), self.train_y[idx])
                loss.backward()
                self.optimizer.step()

    def test(self):
        self.model.eval()
        output = self.model(self.test_x)
        loss = self.loss(output, self.test_y)
        test_acc = (torch.argmax(output, dim=1) == self.test_y).sum().item()
        return test_acc, loss, self.test_y.shape[0]


class Server:
    def __init__(self, args, users_data):
        self.args = args
        self.model = Net()
        self.users = [User(i, d, self.model, args) for i, d in enumerate(users_data)]
        self.metrics = {"glob_acc": [], "glob_loss": []}

    def send_parameters(self):
        for user in self.users:
            user.set_parameters(self.model)

    def aggregate_parameters(self):
        total = sum(u.train_x.shape[0] for u in self.users)
        for p in self.model.parameters():
            p.data = torch.zeros_like(p.data)
        for user in self.users:
            ratio = user.train_x.shape[0] / total
            for server_p, user_p in zip(self.model.parameters(), user.model.parameters()):
                server_p.data += user_p.data.clone() * ratio

    def test(self):
        num_samples, tot_correct, losses = [], [], []
        for c in self.users:
            ct, c_loss, ns = c.test()
            tot_correct.append(ct * 1.0)
            num_samples.append(ns)
            losses.append(c_loss)
        ids = [c.id for c in self.users]
        return ids, num_samples, tot_correct, losses

    def evaluate(self):
        test_ids, test_samples, test_accs, test_losses = self.test()
        glob_acc = np.sum(test_accs) * 1.0 / np.sum(test_samples)
        glob_loss = np.sum([x * y for (x, y) in zip(test_samples, test_losses)]).item() / np.sum(test_samples)  # raises
        self.metrics["glob_acc"].append(glob_acc)
        self.metrics["glob_loss"].append(glob_loss)
        log.info("Average Global Accuracy = %.4f, Loss = %.4f", glob_acc, glob_loss)

    def train(self):
        for glob_iter in range(self.args.num_glob_iters):
            log.info("-------------Round number: %d -------------", glob_iter)
            self.send_parameters()
            self.evaluate()
            for user in self.users:
                user.train()
            self.aggregate_parameters()
        self.send_parameters()
        self.evaluate()
        return self.metrics


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    users_data = make_federated_data(args.num_users, args.alpha, args.seed)
    log.info("%s on %s with %d users", args.algorithm, args.dataset, args.num_users)
    server = Server(args, users_data)
    metrics = server.train()
    best = int(np.argmax(metrics["glob_acc"]))
    log.info("Best global accuracy %.4f at round %d", metrics["glob_acc"][best], best)


if __name__ == "__main__":
    main()
