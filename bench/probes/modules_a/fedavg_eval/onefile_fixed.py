# expect: clean
# source: https://github.com/zhuangdizhu/FedGen/issues/15
"""Federated averaging (FedAvg) of a small MLP over 5 simulated clients with
non-IID synthetic 2-D classification data; after every global round the
server evaluates the global model on every client's test split."""
import copy

import numpy as np
import torch


class Server:
    def __init__(self, model, users, num_glob_iters, local_epochs):
        self.model = copy.deepcopy(model)
        self.users = users
        self.selected_users = users
        self.num_glob_iters = num_glob_iters
        self.local_epochs = local_epochs
        self.metrics = {'glob_acc': [], 'glob_loss': []}

    def send_parameters(self):
        for user in self.users:
            user.set_parameters(self.model)

    def aggregate_parameters(self):
        total_train = sum(user.train_samples for user in self.selected_users)
        for param in self.model.parameters():
            param.data = torch.zeros_like(param.data)
        for user in self.selected_users:
            ratio = user.train_samples / total_train
            for server_param, user_param in zip(self.model.parameters(), user.model.parameters()):
                server_param.data = server_param.data + user_param.data.clone() * ratio

    def test(self):
        '''tests self.latest_model on given clients'''
        num_samples = []
        tot_correct = []
        losses = []
        for c in self.users:
            ct, c_loss, ns = c.test()
            tot_correct.append(ct * 1.0)
            num_samples.append(ns)
            losses.append(c_loss)
        ids = [c.id for c in self.users]
        return ids, num_samples, tot_correct, losses

    def evaluate(self, save=True):
        test_ids, test_samples, test_accs, test_losses = self.test()
        test_losses = [t.detach() for t in test_losses]
        glob_acc = np.sum(test_accs) * 1.0 / np.sum(test_samples)
        glob_loss = np.sum([x * y for (x, y) in zip(test_samples, test_losses)]).item() / np.sum(test_samples)
        if save:
            self.metrics['glob_acc'].append(glob_acc)
            self.metrics['glob_loss'].append(glob_loss)
        print("Average Global Accurancy = {:.4f}, Loss = {:.2f}.".format(glob_acc, glob_loss))


import copy

import numpy as np
import torch
import torch.nn as nn



class Net(nn.Module):
    def __init__(self, input_dim=2, hidden=32, num_classes=3):
        super().__init__()
        self.fc1 = nn.Linear(input_dim, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class UserAVG:
    def __init__(self, user_id, train_data, test_data, model, learning_rate, batch_size):
        self.id = user_id
        self.model = copy.deepcopy(model)
        self.train_data, self.test_data = train_data, test_data
        self.train_samples, self.test_samples = len(train_data[1]), len(test_data[1])
        self.batch_size = batch_size
        self.loss = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=learning_rate)

    def set_parameters(self, model):
        for param, new_param in zip(self.model.parameters(), model.parameters()):
            param.data = new_param.data.clone()

    def train(self, local_epochs):
        self.model.train()
        X, y = self.train_data
        for epoch in range(local_epochs):
            for i in range(0, self.train_samples, self.batch_size):
                self.optimizer.zero_grad()
                loss = self.loss(self.model(X[i:i + self.batch_size]), y[i:i + self.batch_size])
                loss.backward()
                self.optimizer.step()

    def test(self):
        self.model.eval()
        x, y = self.test_data
        output = self.model(x)
        test_acc = (torch.sum(torch.argmax(output, dim=1) == y)).item()
        loss = self.loss(output, y)
        return test_acc, loss, y.shape[0]


def make_client_data(rng, n, label_shift):
    y = rng.choice(3, size=n, p=np.roll([0.6, 0.3, 0.1], label_shift))
    centers = np.array([[0., 2.], [2., -1.], [-2., -1.]])
    X = centers[y] + rng.normal(scale=0.8, size=(n, 2))
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y)


torch.manual_seed(0)
rng = np.random.RandomState(0)
global_model = Net()
users = []
for uid in range(5):
    X, y = make_client_data(rng, 80, uid % 3)
    users.append(UserAVG(uid, (X[:60], y[:60]), (X[60:], y[60:]), global_model,
                         learning_rate=0.05, batch_size=16))
server = Server(global_model, users, num_glob_iters=3, local_epochs=2)

for glob_iter in range(server.num_glob_iters):
    print("-------------Round number: ", glob_iter, " -------------")
    server.send_parameters()
    server.evaluate()
    for user in server.selected_users:
        user.train(server.local_epochs)
    server.aggregate_parameters()
