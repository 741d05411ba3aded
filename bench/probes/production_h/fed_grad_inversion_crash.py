# expect: freed_graph
# source: https://github.com/Koukyosyumei/AIJack/issues/159
"""FedAVG with gradient-uploading clients and an honest-but-curious server
that runs a gradient-inversion (DLG / inverting-gradients style) attack on the
pseudo-gradients received from a target client after every round."""
import copy
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)

CONFIG = {
    "data": {"num_samples": 64, "img": 8, "num_classes": 4},
    "fl": {"num_clients": 2, "rounds": 2, "local_epochs": 1, "batch_size": 1, "lr": 0.1},
    "attack": {"target_client_id": 0, "num_iteration": 8, "distancename": "cossim", "lr": 0.1,
               "tv_reg_coef": 1e-3, "log_interval": 4, "num_trial_per_communication": 1},
}


class LeNet(nn.Module):
    def __init__(self, channel=1, hidden=32, num_classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channel, 8, 3, padding=1), nn.Sigmoid(),
                                  nn.Conv2d(8, 8, 3, padding=1, stride=2), nn.Sigmoid())
        self.fc = nn.Sequential(nn.Linear(8 * 4 * 4, hidden), nn.Sigmoid(), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


class FedAVGClient:
    def __init__(self, model, user_id, lr):
        self.model, self.user_id, self.lr = model, user_id, lr
        self.prev_parameters = [copy.deepcopy(p) for p in self.model.parameters()]

    def download(self, new_global_model):
        self.model.load_state_dict(new_global_model)
        self.prev_parameters = [copy.deepcopy(p) for p in self.model.parameters()]

    def local_train(self, local_epoch, criterion, loader, optimizer):
        self.model.train()
        for _ in range(local_epoch):
            running = 0.0
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(self.model(x), y)
                loss.backward()
                optimizer.step()
                running += loss.item()
        return running / max(len(loader), 1)

    def upload_gradients(self):
        return [(prev - param) / self.lr for param, prev in zip(self.model.parameters(), self.prev_parameters)]


class FedAVGServer:
    def __init__(self, clients, server_model, lr):
        self.clients, self.server_model, self.lr = clients, server_model, lr
        self.weight = [1.0 / len(clients)] * len(clients)
        self.uploaded_gradients = []

    def receive(self):
        self.uploaded_gradients = [c.upload_gradients() for c in self.clients]

    def update(self):
        aggregated = [torch.zeros_like(p) for p in self.server_model.parameters()]
        for w, grads in zip(self.weight, self.uploaded_gradients):
            for i, g in enumerate(grads):
                aggregated[i] = aggregated[i] + w * g.detach()
        with torch.no_grad():
            for p, g in zip(self.server_model.parameters(), aggregated):
                p.sub_(self.lr * g)

    def distribute(self):
        for c in self.clients:
            c.download(self.server_model.state_dict())


def cossim(fake_gradients, received_gradients, ignore_pos=()):
    distance, pnorm_0, pnorm_1 = 0, 0, 0
    for i, (f_g, c_g) in enumerate(zip(fake_gradients, received_gradients)):
        if i not in ignore_pos:
            pnorm_0 = pnorm_0 + f_g.pow(2).sum()
            pnorm_1 = pnorm_1 + c_g.pow(2).sum()
            distance = distance + (f_g * c_g).sum()
    return 1 - distance / pnorm_0.sqrt() / pnorm_1.sqrt()


def l2(fake_gradients, received_gradients, ignore_pos=()):
    return sum(((f - c) ** 2).sum() for i, (f, c) in enumerate(zip(fake_gradients, received_gradients))
               if i not in ignore_pos)


def total_variance(x):
    return (x[:, :, :, :-1] - x[:, :, :, 1:]).abs().mean() + (x[:, :, :-1, :] - x[:, :, 1:, :]).abs().mean()


class GradientInversion_Attack:
    def __init__(self, target_model, x_shape, num_classes, num_iteration, distancename, lr, tv_reg_coef,
                 log_interval, **kwargs):
        self.target_model, self.x_shape, self.num_classes = target_model, x_shape, num_classes
        self.num_iteration, self.lr, self.tv_reg_coef = num_iteration, lr, tv_reg_coef
        self.distancefunc = {"cossim": cossim, "l2": l2}[distancename]
        self.log_interval = log_interval
        self.lossfunc = nn.CrossEntropyLoss()

    def reset_seed(self, seed):
        torch.manual_seed(seed)

    def _estimate_label(self, received_gradients):
        with torch.no_grad():
            return torch.argmin(received_gradients[-2].sum(-1)).view(1)

    def _setup_closure(self, optimizer, fake_x, fake_label, received_gradients):
        def closure():
            optimizer.zero_grad()
            fake_pred = self.target_model(fake_x)
            fake_loss = self.lossfunc(fake_pred, fake_label)
            fake_gradients = torch.autograd.grad(fake_loss, self.target_model.parameters(), create_graph=True)
            distance = self.distancefunc(fake_gradients, received_gradients)
            distance = distance + self.tv_reg_coef * total_variance(fake_x)
            distance_val = distance.item()
            distance.backward(retain_graph=False)  # raises
            return distance_val
        return closure

    def attack(self, received_gradients, batch_size=1):
        fake_x = torch.rand((batch_size,) + tuple(self.x_shape)).requires_grad_(True)
        fake_label = self._estimate_label(received_gradients)
        optimizer = torch.optim.Adam([fake_x], lr=self.lr)
        best_distance, best_fake_x = float("inf"), None
        for i in range(1, self.num_iteration + 1):
            distance = optimizer.step(self._setup_closure(optimizer, fake_x, fake_label, received_gradients))
            with torch.no_grad():
                fake_x[:] = fake_x.clamp(0.0, 1.0)
            if distance < best_distance:
                best_distance, best_fake_x = distance, fake_x.detach().clone()
            if self.log_interval and i % self.log_interval == 0:
                print(f"  iter={i}: {distance:.4f} (best {best_distance:.4f})")
        return best_fake_x, fake_label


def attach_gradient_inversion_attack_to_server(cls, x_shape, target_client_id=0, num_trial_per_communication=1,
                                               **gradinvattack_kwargs):
    class GradientInversionServerWrapper(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.target_client_id = target_client_id
            self.num_trial_per_communication = num_trial_per_communication
            self.attacker = GradientInversion_Attack(self.server_model, x_shape, **gradinvattack_kwargs)
            self.attack_results = []

        def receive(self, *args, **kwargs):
            super().receive(*args, **kwargs)
            results = []
            for s in range(self.num_trial_per_communication):
                self.attacker.reset_seed(s)
                results.append(self.attack())
            self.attack_results.append(results)

        def attack(self, **kwargs):
            received_gradient = self.uploaded_gradients[self.target_client_id]
            return self.attacker.attack(received_gradient, **kwargs)

    return GradientInversionServerWrapper


def make_client_data(cfg, n_clients):
    d = cfg["data"]
    g = torch.Generator().manual_seed(5)
    protos = torch.rand(d["num_classes"], 1, d["img"], d["img"], generator=g)
    y = torch.randint(0, d["num_classes"], (d["num_samples"],), generator=g)
    x = (protos[y] + 0.1 * torch.randn(d["num_samples"], 1, d["img"], d["img"], generator=g)).clamp(0, 1)
    shards = torch.arange(d["num_samples"]).chunk(n_clients)
    return [[(x[idx[j:j + 1]], y[idx[j:j + 1]]) for j in range(0, 2)] for idx in shards]


def main():
    cfg, t0 = CONFIG, time.time()
    fl, d = cfg["fl"], cfg["data"]
    global_model = LeNet(num_classes=d["num_classes"])
    clients = [FedAVGClient(copy.deepcopy(global_model), i, fl["lr"]) for i in range(fl["num_clients"])]
    Server = attach_gradient_inversion_attack_to_server(FedAVGServer, (1, d["img"], d["img"]),
                                                        num_classes=d["num_classes"], **cfg["attack"])
    server = Server(clients, global_model, fl["lr"])
    loaders = make_client_data(cfg, fl["num_clients"])
    criterion = nn.CrossEntropyLoss()
    for rnd in range(fl["rounds"]):
        losses = []
        for client, loader in zip(clients, loaders):
            opt = torch.optim.SGD(client.model.parameters(), lr=fl["lr"])
            losses.append(client.local_train(fl["local_epochs"], criterion, loader, opt))
        server.receive()
        server.update()
        server.distribute()
        rec_x, rec_y = server.attack_results[-1][0]
        true_x = loaders[cfg["attack"]["target_client_id"]][0][0]
        print(f"round {rnd} client loss {np.mean(losses):.4f} label {rec_y.item()} "
              f"rec mse {F.mse_loss(rec_x, true_x).item():.4f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
