# expect: numpy_requires_grad
# source: https://github.com/zhuangdizhu/FedGen/issues/1
import argparse
import copy
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

METRICS = ['glob_acc', 'per_acc', 'glob_loss', 'per_loss', 'user_train_time', 'server_agg_time']


class Net(nn.Module):
    def __init__(self, input_dim=64, hidden_dim=32, output_dim=10):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x):
        z = F.relu(self.fc1(x))
        out = F.log_softmax(self.fc2(z), dim=1)
        return {'output': out}


def read_data(num_users, samples_per_user=60, input_dim=64, num_classes=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    data = []
    for uid in range(num_users):
        X = torch.randn(samples_per_user, input_dim, generator=g)
        y = torch.randint(0, num_classes, (samples_per_user,), generator=g)
        split = int(0.75 * samples_per_user)
        data.append(('f_{0:05d}'.format(uid), TensorDataset(X[:split], y[:split]), TensorDataset(X[split:], y[split:])))
    return data


class User:
    def __init__(self, args, id, model, train_data, test_data):
        self.model = copy.deepcopy(model[0])
        self.model_name = model[1]
        self.id = id
        self.train_samples = len(train_data)
        self.test_samples = len(test_data)
        self.batch_size = args.batch_size
        self.learning_rate = args.learning_rate
        self.local_epochs = args.local_epochs
        self.K = args.K
        self.trainloader = DataLoader(train_data, self.batch_size, shuffle=True, drop_last=True)
        self.testloaderfull = DataLoader(test_data, self.test_samples)
        self.iter_trainloader = iter(self.trainloader)
        self.loss = nn.NLLLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.learning_rate)

    def set_parameters(self, model):
        for old_param, new_param in zip(self.model.parameters(), model.parameters()):
            old_param.data = new_param.data.clone()

    def get_next_train_batch(self):
        try:
            (X, y) = next(self.iter_trainloader)
        except StopIteration:
            self.iter_trainloader = iter(self.trainloader)
            (X, y) = next(self.iter_trainloader)
        return {'X': X, 'y': y}

    def test(self):
        self.model.eval()
        test_acc = 0
        loss = 0
        for x, y in self.testloaderfull:
            output = self.model(x)['output']
            loss += self.loss(output, y)
            test_acc += (torch.sum(torch.argmax(output, dim=1) == y)).item()
        return test_acc, loss, y.shape[0]


class UserAVG(User):
    def train(self, glob_iter):
        self.model.train()
        for epoch in range(1, self.local_epochs + 1):
            for i in range(self.K):
                result = self.get_next_train_batch()
                X, y = result['X'], result['y']
                self.optimizer.zero_grad()
                output = self.model(X)['output']
                loss = self.loss(output, y)
                loss.backward()
                self.optimizer.step()


class Server:
    def __init__(self, args, model, seed):
        self.num_glob_iters = args.num_glob_iters
        self.model = copy.deepcopy(model[0])
        self.model_name = model[1]
        self.users = []
        self.selected_users = []
        self.num_users = args.num_users
        self.seed = seed
        self.metrics = {key: [] for key in METRICS}
        self.total_train_samples = 0

    def send_parameters(self):
        for user in self.users:
            user.set_parameters(self.model)

    def add_parameters(self, user, ratio):
        for server_param, user_param in zip(self.model.parameters(), user.model.parameters()):
            server_param.data = server_param.data + user_param.data.clone() * ratio

    def aggregate_parameters(self):
        for param in self.model.parameters():
            param.data = torch.zeros_like(param.data)
        total_train = sum(user.train_samples for user in self.selected_users)
        for user in self.selected_users:
            self.add_parameters(user, user.train_samples / total_train)

    def select_users(self, round, num_users):
        if num_users == len(self.users):
            return self.users
        num_users = min(num_users, len(self.users))
        return np.random.choice(self.users, num_users, replace=False)

    def test(self, selected=False):
        num_samples, tot_correct, losses = [], [], []
        users = self.selected_users if selected else self.users
        for c in users:
            ct, c_loss, ns = c.test()
            tot_correct.append(ct * 1.0)
            num_samples.append(ns)
            losses.append(c_loss)
        ids = [c.id for c in self.users]
        return ids, num_samples, tot_correct, losses

    def evaluate(self, save=True, selected=False):
        test_ids, test_samples, test_accs, test_losses = self.test(selected=selected)
        glob_acc = np.sum(test_accs) * 1.0 / np.sum(test_samples)
        glob_loss = np.sum([x * y for (x, y) in zip(test_samples, test_losses)]).item() / np.sum(test_samples)  # raises
        if save:
            self.metrics['glob_acc'].append(glob_acc)
            self.metrics['glob_loss'].append(glob_loss)
        print("Average Global Accurancy = {:.4f}, Loss = {:.2f}.".format(glob_acc, glob_loss))


class FedAvg(Server):
    def __init__(self, args, model, seed):
        super().__init__(args, model, seed)
        data = read_data(args.total_users)
        print("Users in total: {}".format(len(data)))
        for id, train_data, test_data in data:
            user = UserAVG(args, id, model, train_data, test_data)
            self.users.append(user)
            self.total_train_samples += user.train_samples
        print("Finished creating FedAvg server.")

    def train(self, args):
        for glob_iter in range(self.num_glob_iters):
            print("\n-------------Round number: ", glob_iter, " -------------\n")
            self.selected_users = self.select_users(glob_iter, self.num_users)
            self.send_parameters()
            self.evaluate()
            self.timestamp = time.time()
            for user in self.selected_users:
                user.train(glob_iter)
            self.metrics['user_train_time'].append((time.time() - self.timestamp) / len(self.selected_users))
            self.timestamp = time.time()
            self.aggregate_parameters()
            self.metrics['server_agg_time'].append(time.time() - self.timestamp)


def main(args):
    torch.manual_seed(0)
    np.random.seed(0)
    model = (Net(), args.model)
    server = FedAvg(args, model, seed=0)
    server.train(args)
    print("glob_acc history:", ["%.3f" % a for a in server.metrics['glob_acc']])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", type=str, default="Mnist-alpha0.1-ratio0.5")
    parser.add_argument("--model", type=str, default="cnn")
    parser.add_argument("--algorithm", type=str, default="FedAvg")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--num_glob_iters", type=int, default=3)
    parser.add_argument("--local_epochs", type=int, default=2)
    parser.add_argument("--K", type=int, default=1)
    parser.add_argument("--num_users", type=int, default=4)
    parser.add_argument("--total_users", type=int, default=6)
    args = parser.parse_args()
    main(args)
