# expect: leaf_inplace
# source: https://github.com/cugzj/KT-pFL/issues/3
"""Personalized federated learning by knowledge transfer (KT-pFL style).

Several heterogeneous client models are first trained on their private data.
Each collaboration round the clients predict soft labels on a shared public
alignment set, the server learns a knowledge-coefficient matrix that mixes
the clients' logits into personalized teacher logits, every client distills
from its personalized teacher and then trains again on its private data.
Synthetic non-IID data stands in for the FEMNIST/FMNIST splits.
"""
import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import SGD
from torch.utils.data import DataLoader, Dataset


class data(Dataset):
    def __init__(self, data, labels):
        self.data = torch.as_tensor(data, dtype=torch.float32)
        self.labels = torch.as_tensor(labels)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        return self.data[idx], self.labels[idx]


data_new = data


def generate_alignment_data(X, y, N_alignment=64, rng=np.random):
    idx = rng.choice(len(X), N_alignment, replace=False)
    return {"X": X[idx], "y": y[idx]}


def make_federated_data(n_parties, n_classes=6, dim=20, n_per_party=96, seed=0):
    rng = np.random.RandomState(seed)
    centers = rng.randn(n_classes, dim) * 2.0
    users = []
    for i in range(n_parties):
        classes = rng.choice(n_classes, 3, replace=False)  # non-iid label skew
        y = rng.choice(classes, n_per_party)
        X = centers[y] + rng.randn(n_per_party, dim)
        users.append((X[:64], y[:64], X[64:], y[64:]))
    y_pub = rng.randint(0, n_classes, 256)
    X_pub = centers[y_pub] + rng.randn(256, dim)
    return users, {"X": X_pub.astype(np.float32), "y": y_pub}


def KL_loss(inputs, target, reduction='average'):
    log_likelihood = F.log_softmax(inputs, dim=1)
    if reduction == 'average':
        loss = F.kl_div(log_likelihood, target, reduction='mean')
    else:
        loss = F.kl_div(log_likelihood, target, reduction='sum')
    return loss


def train_one_model(model, train_dataloader, test_dataloader, optimizer, epoch, device, criterion,
                    with_softmax=True, is_val=True, Temp=1.0):
    model.to(device)
    all_train_loss, all_train_acc, all_val_loss, all_val_acc = [], [], [], []
    for iter in range(epoch):
        model.train()
        train_loss, train_acc = [], []
        for batch_idx, (images, labels) in enumerate(train_dataloader):
            images, labels = images.to(device), labels.to(device)
            model.zero_grad()
            log_probs = model(images)
            if with_softmax:
                loss = criterion(log_probs, labels)
                loss.backward()
                optimizer.step()
                acc = torch.mean((labels == torch.argmax(log_probs, dim=-1)).to(torch.float32))
                train_acc.append(acc.item())
                train_loss.append(loss.item())
            else:
                output_logit = log_probs.float() / Temp
                loss = KL_loss(output_logit, labels)
                loss.backward()
                optimizer.step()
        if with_softmax:
            all_train_loss.append(sum(train_loss) / len(train_loss))
            all_train_acc.append(sum(train_acc) / len(train_acc))
            if is_val:
                val_loss, val_acc = val_one_model(model, test_dataloader, criterion, device)
                all_val_loss.append(val_loss)
                all_val_acc.append(val_acc)
    return all_train_loss, all_train_acc, all_val_loss, all_val_acc


def val_one_model(model, dataloader, criterion=None, device=torch.device('cpu')):
    model.eval()
    acc, loss_out = [], []
    with torch.no_grad():
        for batch_idx, (images, labels) in enumerate(dataloader):
            images, labels = images.to(device), labels.to(device)
            log_probs = model(images)
            if criterion is not None:
                loss_out.append(criterion(log_probs, labels).item())
            acc.append(torch.mean((labels == torch.argmax(log_probs, dim=-1)).to(torch.float32)).item())
        if criterion is not None:
            return sum(loss_out) / len(loss_out), sum(acc) / len(acc)
        return sum(acc) / len(acc)


def get_models_logits(raw_logits, weight_alpha, N_models, penalty_ratio):
    weight_mean = torch.ones(N_models, N_models, requires_grad=True)
    weight_mean = weight_mean.float() / (N_models)
    loss_fn = torch.nn.MSELoss(reduce=True, size_average=True)
    teacher_logits = torch.zeros(N_models, np.size(raw_logits[0], 0), np.size(raw_logits[0], 1), requires_grad=False)
    models_logits = torch.zeros(N_models, np.size(raw_logits[0], 0), np.size(raw_logits[0], 1), requires_grad=True)
    weight = weight_alpha.clone()
    for self_idx in range(N_models):
        teacher_logits_local = teacher_logits[self_idx]
        for teacher_idx in range(N_models):
            teacher_logits_local = torch.add(teacher_logits_local,
                                             weight[self_idx][teacher_idx] * torch.from_numpy(raw_logits[teacher_idx]))
        loss_input = torch.from_numpy(raw_logits[self_idx])
        loss_target = teacher_logits_local
        loss = loss_fn(loss_input, loss_target)
        loss_penalty = loss_fn(weight[self_idx], weight_mean[self_idx])
        loss += loss_penalty * penalty_ratio
        weight.retain_grad()
        loss.backward(retain_graph=True)
        with torch.no_grad():
            gradabs = torch.abs(weight.grad)
            gradsum = torch.sum(gradabs)
            gradavg = gradsum.item() / (N_models)
            grad_lr = 1.0
            for i in range(5):
                if gradavg > 0.01:
                    gradavg = gradavg * 1.0 / 5
                    grad_lr = grad_lr / 5
                if gradavg < 0.01:
                    gradavg = gradavg * 1.0 * 5
                    grad_lr = grad_lr * 5
            weight.sub_(weight.grad * grad_lr)
            weight.grad.zero_()
    # update raw_logits
    for self_idx in range(N_models):
        weight_tmp = torch.zeros(N_models)
        idx_count = 0
        for teacher_idx in range(N_models):
            weight_tmp[idx_count] = weight[self_idx][teacher_idx]
            idx_count += 1
        weight_local = nn.functional.softmax(weight_tmp * 5.0, dim=0)
        idx_count = 0
        for teacher_idx in range(N_models):
            models_logits[self_idx] = torch.add(models_logits[self_idx], weight_local[idx_count] * torch.from_numpy(raw_logits[teacher_idx]))  # raises
            with torch.no_grad():
                weight[self_idx][teacher_idx] = weight_local[idx_count]
            idx_count += 1
    return models_logits, weight


def predict(model, dataarray, device, T):
    model.eval()
    out = []
    bs = 32
    dataarray = dataarray.astype(np.float32)
    with torch.no_grad():
        for ind in range(0, len(dataarray), bs):
            logit = model(torch.from_numpy(dataarray[ind:(ind + bs)]).to(device))
            Tsoftmax = nn.Softmax(dim=1)
            out.append(Tsoftmax(logit.float() / T).cpu().numpy())
    return np.concatenate(out)


class KT_pFL():
    def __init__(self, parties, public_dataset, private_data, KT_pFL_params, model_init_params, device='cpu'):
        self.N_parties = len(parties)
        self.public_dataset = public_dataset
        self.private_data = private_data
        self.N_alignment = KT_pFL_params['N_alignment']
        self.N_rounds = KT_pFL_params['N_rounds']
        self.N_logits_matching_round = KT_pFL_params['N_logits_matching_round']
        self.logits_matching_batchsize = KT_pFL_params['logits_matching_batchsize']
        self.N_private_training_round = KT_pFL_params['N_private_training_round']
        self.private_training_batchsize = KT_pFL_params['private_training_batchsize']
        self.device = device
        self.Temp = model_init_params['Temp']
        self.penalty_ratio = model_init_params['penalty_ratio']
        self.rng = np.random.RandomState(1)
        self.collaborative_parties = []
        self.init_result = []
        print("start model initialization: ")
        for i in range(self.N_parties):
            X_train, y_train, X_test, y_test = self.private_data[i]
            model = parties[i]
            train_dataloader = DataLoader(data_new(X_train, y_train), batch_size=model_init_params['batch_size'], shuffle=True)
            test_dataloader = DataLoader(data_new(X_test, y_test), batch_size=model_init_params['batch_size'])
            optimizer = SGD(model.parameters(), lr=0.02)
            criterion = nn.CrossEntropyLoss()
            train_loss, train_acc, val_loss, val_acc = train_one_model(
                model, train_dataloader, test_dataloader, optimizer, model_init_params['epochs'], self.device, criterion)
            self.collaborative_parties.append(model)
            self.init_result.append({"val_acc": val_acc, "train_acc": train_acc, "val_loss": val_loss, "train_loss": train_loss})
            print('val_acc:', i, val_acc)
        print("finish model initialization: ")

    def collaborative_training(self):
        collaboration_performance = {i: [] for i in range(self.N_parties)}
        r = 0
        weight_alpha = torch.ones(self.N_parties, self.N_parties, requires_grad=True)
        weight_alpha = weight_alpha.float() / (self.N_parties)
        while True:
            # At beginning of each round, generate new alignment dataset
            alignment_data = generate_alignment_data(self.public_dataset["X"], self.public_dataset["y"],
                                                     self.N_alignment, self.rng)
            print("round ", r)
            print("update logits ... ")
            logits = []
            for model in self.collaborative_parties:
                X_data = copy.deepcopy(alignment_data["X"])
                logits.append(predict(model, X_data, self.device, self.Temp))
            logits_models, weight_alpha = get_models_logits(logits, weight_alpha, self.N_parties, self.penalty_ratio)
            logits_models = logits_models.detach().numpy()

            print("test performance ... ")
            for index, model in enumerate(self.collaborative_parties):
                X_train, y_train, X_test, y_test = self.private_data[index]
                dataloader = DataLoader(data_new(X_test, y_test), batch_size=8, shuffle=False)
                acc = val_one_model(model, dataloader, criterion=None, device=self.device)
                collaboration_performance[index].append(acc)
                print(collaboration_performance[index][-1])

            r += 1
            if r > self.N_rounds:
                break

            print("updates models ...")
            for index, model in enumerate(self.collaborative_parties):
                X_train, y_train, X_test, y_test = self.private_data[index]
                train_dataloader = DataLoader(data(alignment_data["X"], logits_models[index]),
                                              batch_size=self.logits_matching_batchsize, shuffle=True)
                optimizer = SGD(model.parameters(), lr=0.02)
                train_one_model(model, train_dataloader, None, optimizer, self.N_logits_matching_round, self.device,
                                nn.MSELoss(), with_softmax=False, is_val=False, Temp=self.Temp)
                train_dataloader = DataLoader(data_new(X_train, y_train), batch_size=self.private_training_batchsize, shuffle=True)
                optimizer = SGD(model.parameters(), lr=0.02)
                train_one_model(model, train_dataloader, None, optimizer, self.N_private_training_round, self.device,
                                nn.CrossEntropyLoss(), is_val=False)
        return collaboration_performance


def build_party(dim, n_classes, width):
    return nn.Sequential(nn.Linear(dim, width), nn.ReLU(), nn.Linear(width, n_classes))


def main():
    torch.manual_seed(0)
    conf = {
        "N_parties": 3,
        "model_init_params": {"epochs": 2, "batch_size": 16, "Temp": 10.0, "penalty_ratio": 0.7},
        "KT_pFL_params": {"N_alignment": 64, "N_rounds": 2, "N_logits_matching_round": 1,
                          "logits_matching_batchsize": 16, "N_private_training_round": 1,
                          "private_training_batchsize": 16},
    }
    private_data, public_dataset = make_federated_data(conf["N_parties"])
    parties = [build_party(20, 6, w) for w in (32, 48, 64)]
    fed = KT_pFL(parties, public_dataset, private_data, conf["KT_pFL_params"], conf["model_init_params"])
    performance = fed.collaborative_training()
    print({k: [round(a, 3) for a in v] for k, v in performance.items()})


if __name__ == "__main__":
    main()
