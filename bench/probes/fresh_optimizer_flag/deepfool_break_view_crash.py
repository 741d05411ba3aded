# expect: requires_grad_nonleaf
# source: https://github.com/Harry24k/adversarial-attacks-pytorch/issues/2
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Attack(object):
    """
    An abstract class representing attacks.

    Arguments:
        name (string): name of the attack.
        model (nn.Module): a model to attack.
    """
    def __init__(self, name, model):
        self.attack = name
        self.model = model
        self.model_name = str(model).split("(")[0]
        self.training = model.training
        self.device = torch.device("cuda" if next(model.parameters()).is_cuda else "cpu")
        self.mode = 'float'

    def __str__(self):
        info = self.__dict__.copy()
        del info['model']
        del info['attack']
        return self.attack + "(" + ', '.join('{}={}'.format(key, val) for key, val in info.items()) + ")"

    def __call__(self, *input, **kwargs):
        self.model.eval()
        images = self.forward(*input, **kwargs)
        self._switch_model()
        if self.mode == 'int':
            images = (images * 255).type(torch.uint8)
        return images

    def _switch_model(self):
        if self.training:
            self.model.train()
        else:
            self.model.eval()

    def forward(self, *input):
        raise NotImplementedError


class DeepFool(Attack):
    """
    'DeepFool: A Simple and Accurate Method to Fool Deep Neural Networks'
    [https://arxiv.org/abs/1511.04599]

    Arguments:
        model (nn.Module): a model to attack.
        iters (int): max iterations. (DEFALUT : 3)
    """
    def __init__(self, model, iters=3):
        super(DeepFool, self).__init__("DeepFool", model)
        self.iters = iters

    def forward(self, images, labels):
        images = images.to(self.device)
        labels = labels.to(self.device)

        for b in range(images.shape[0]):

            image = images[b:b+1, :, :, :]
            label = labels[b:b+1]

            image.requires_grad = True  # raises
            output = self.model(image)[0]

            _, pre_0 = torch.max(output, 0)
            f_0 = output[pre_0]
            grad_f_0 = torch.autograd.grad(f_0, image,
                                           retain_graph=False,
                                           create_graph=False)[0]
            num_classes = len(output)

            for i in range(self.iters):
                image.requires_grad = True
                output = self.model(image)[0]
                _, pre = torch.max(output, 0)

                if pre != pre_0:
                    break

                r = None
                min_value = None

                for k in range(num_classes):
                    if k == pre_0:
                        continue

                    f_k = output[k]
                    grad_f_k = torch.autograd.grad(f_k, image,
                                                   retain_graph=True,
                                                   create_graph=True)[0]

                    f_prime = f_k - f_0
                    grad_f_prime = grad_f_k - grad_f_0
                    value = torch.abs(f_prime)/torch.norm(grad_f_prime)

                    if r is None:
                        r = (torch.abs(f_prime)/(torch.norm(grad_f_prime)**2))*grad_f_prime
                        min_value = value
                    else:
                        if min_value > value:
                            r = (torch.abs(f_prime)/(torch.norm(grad_f_prime)**2))*grad_f_prime
                            min_value = value

                image = torch.clamp(image + r, min=0, max=1).detach()

            images[b:b+1, :, :, :] = image

        adv_images = images

        return adv_images


class CNN(nn.Module):
    def __init__(self, num_classes=10):
        super(CNN, self).__init__()
        self.layer = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x):
        return self.fc(self.layer(x).view(x.size(0), -1))


def make_loaders(args):
    g = torch.Generator().manual_seed(args.seed)
    prototypes = torch.rand(10, 1, 16, 16, generator=g)
    labels = torch.randint(0, 10, (args.n_samples,), generator=g)
    images = (prototypes[labels] + 0.15 * torch.randn(args.n_samples, 1, 16, 16, generator=g)).clamp(0, 1)
    ds = TensorDataset(images, labels)
    return DataLoader(ds, batch_size=args.batch_size, shuffle=False)


def train(model, loader, args):
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.train()
    for epoch in range(args.epochs):
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print('Epoch [%d/%d], Loss: %.4f' % (epoch + 1, args.epochs, loss.item()))


def evaluate(model, attack, loader):
    correct, correct_adv, total = 0, 0, 0
    for images, labels in loader:
        with torch.no_grad():
            correct += (model(images).argmax(1) == labels).sum().item()
        adv_images = attack(images.clone(), labels)
        with torch.no_grad():
            correct_adv += (model(adv_images).argmax(1) == labels).sum().item()
        total += labels.size(0)
    print('Standard accuracy: %.2f %% | Robust accuracy (%s): %.2f %%'
          % (100 * correct / total, attack.attack, 100 * correct_adv / total))


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--n_samples', type=int, default=64)
    parser.add_argument('--batch_size', type=int, default=16)
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--lr', type=float, default=0.01)
    parser.add_argument('--iters', type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    loader = make_loaders(args)
    model = CNN()
    train(model, loader, args)
    attack = DeepFool(model, iters=args.iters)
    print(attack)
    evaluate(model, attack, loader)
