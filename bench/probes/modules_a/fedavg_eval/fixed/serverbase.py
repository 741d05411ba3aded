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
