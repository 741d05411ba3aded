# expect: clean
# source: https://github.com/DSE-MSU/DeepRobust/issues/36
"""DeepRobust-style PGD adversarial training defense: a PGD attack class generates
adversarial examples, the PGDtraining defense trains on them epoch by epoch,
and the robust-accuracy test re-attacks with random restarts, warm-starting
each restart from the previous adversarial batch."""
import logging

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
logging.basicConfig(level=logging.WARNING)
logger = logging.getLogger("deeprobust")


class Net(nn.Module):
    def __init__(self, in_channel1=1, out_channel1=8, out_channel2=16, H=28, W=28):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(in_channel1, out_channel1, 5, 1)
        self.conv2 = nn.Conv2d(out_channel1, out_channel2, 5, 1)
        self.fc1 = nn.Linear(int((((H - 4) / 2 - 4) / 2) ** 2 * out_channel2), 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(x, 2, 2)
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2, 2)
        x = x.view(x.size(0), -1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


class BaseAttack(object):
    def __init__(self, model, device='cpu'):
        self.model = model
        self.device = device

    def check_type_device(self, image, label):
        return image.to(self.device), label.to(self.device)


def pgd_attack(model, X, y, epsilon, clip_max, clip_min, num_steps, step_size, print_process):
    out = model(X)
    err = (out.data.max(1)[1] != y.data).float().sum()
    X_pgd = X.clone()
    X_pgd.requires_grad = True
    for i in range(num_steps):
        pred = model(X_pgd)
        loss = nn.CrossEntropyLoss()(pred, y)
        if print_process:
            logger.info("iteration {:.0f}, loss:{:.4f}".format(i, loss))
        loss.backward()
        eta = step_size * X_pgd.grad.data.sign()
        X_pgd = X_pgd + eta
        eta = torch.clamp(X_pgd.data - X.data, -epsilon, epsilon)
        X_pgd = X.data + eta
        X_pgd = torch.clamp(X_pgd, clip_min, clip_max)
        X_pgd = X_pgd.detach()
        X_pgd.requires_grad_()
        X_pgd.retain_grad()
    return X_pgd.detach()


class PGD(BaseAttack):
    def generate(self, image, label, **kwargs):
        self.parse_params(**kwargs)
        image, label = self.check_type_device(image, label)
        return pgd_attack(self.model, image, label, self.epsilon, self.clip_max, self.clip_min,
                          self.num_steps, self.step_size, self.print_process)

    def parse_params(self, epsilon=0.3, num_steps=10, step_size=0.01, clip_max=1.0,
                     clip_min=0.0, print_process=False):
        self.epsilon = epsilon
        self.num_steps = num_steps
        self.step_size = step_size
        self.clip_max = clip_max
        self.clip_min = clip_min
        self.print_process = print_process
        return True


class PGDtraining(object):
    def __init__(self, model, device='cpu'):
        self.model = model
        self.device = device

    def generate(self, train_loader, test_loader, **kwargs):
        self.parse_params(**kwargs)
        optimizer = optim.SGD(self.model.parameters(), lr=self.lr, momentum=0.9)
        for epoch in range(1, self.epoch_num + 1):
            self.train(train_loader, optimizer, epoch)
            self.test(test_loader)
        return self.model

    def parse_params(self, epoch_num=2, lr=0.05, epsilon=0.3, num_steps=3,
                     perturb_step_size=0.05, restarts=2):
        self.epoch_num = epoch_num
        self.lr = lr
        self.epsilon = epsilon
        self.num_steps = num_steps
        self.perturb_step_size = perturb_step_size
        self.restarts = restarts

    def adv_data(self, data, output, ep=0.3, num_steps=10, perturb_step_size=0.01):
        adversary = PGD(self.model, device=self.device)
        data_adv = adversary.generate(data, output.flatten(), epsilon=ep, num_steps=num_steps,
                                      step_size=perturb_step_size)
        output = self.model(data_adv)
        return data_adv, output

    def calculate_loss(self, output, target, redmode='mean'):
        return F.nll_loss(output, target, reduction=redmode)

    def train(self, train_loader, optimizer, epoch):
        self.model.train()
        correct, bs = 0, 0
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            data_adv, output = self.adv_data(data, target, ep=self.epsilon, num_steps=self.num_steps,
                                             perturb_step_size=self.perturb_step_size)
            loss = self.calculate_loss(output, target)
            loss.backward()
            optimizer.step()
            correct += output.argmax(dim=1).eq(target).sum().item()
            bs += data.shape[0]
        print('Epoch {}: adv train acc {:.2f}%'.format(epoch, 100. * correct / bs))

    def test(self, test_loader):
        self.model.eval()
        correct, correct_adv, n = 0, 0, 0
        for data, target in test_loader:
            with torch.no_grad():
                correct += self.model(data).argmax(1).eq(target).sum().item()
            # restarts: warm-start each restart from the previous adversarial batch
            data_adv = data
            for _ in range(self.restarts):
                data_adv, output_adv = self.adv_data(data_adv, target, ep=self.epsilon,
                                                     num_steps=self.num_steps,
                                                     perturb_step_size=self.perturb_step_size)
            correct_adv += output_adv.argmax(1).eq(target).sum().item()
            n += data.shape[0]
        print('Test clean acc {:.2f}%, robust acc {:.2f}%'.format(100. * correct / n,
                                                                  100. * correct_adv / n))


def make_loader(n, batch_size, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, n, batch_size)]


if __name__ == '__main__':
    model = Net()
    defense = PGDtraining(model, 'cpu')
    defense.generate(make_loader(64, 16, 0), make_loader(32, 16, 1), epoch_num=2, lr=0.05)
