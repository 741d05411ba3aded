# expect: requires_grad_nonleaf
# source: https://github.com/Harry24k/adversarial-attacks-pytorch/issues/2
import argparse

import numpy as np
import torch
import torch.nn as nn


def get_args(argv=None):
    parser = argparse.ArgumentParser(description="DeepFool robustness check")
    parser.add_argument("--n-samples", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--overshoot", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


class SmallNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(),
                                        nn.Linear(32, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


class Attack(object):
    def __init__(self, name, model):
        self.attack = name
        self.model = model.eval()
        self.device = next(model.parameters()).device

    def forward(self, *input):
        raise NotImplementedError

    def __call__(self, *input, **kwargs):
        return self.forward(*input, **kwargs)

    def __str__(self):
        return "{}(device={})".format(self.attack, self.device)


class DeepFool(Attack):
    """
    'DeepFool: A Simple and Accurate Method to Fool Deep Neural Networks'
    [https://arxiv.org/abs/1511.04599]
    """
    def __init__(self, model, steps=3, overshoot=0.02):
        super(DeepFool, self).__init__("DeepFool", model)
        self.steps = steps
        self.overshoot = overshoot

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

            for i in range(self.steps):
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
                    value = torch.abs(f_prime) / torch.norm(grad_f_prime)

                    if r is None or min_value > value:
                        r = (torch.abs(f_prime) / (torch.norm(grad_f_prime) ** 2)) * grad_f_prime
                        min_value = value

                image = torch.clamp(image + (1 + self.overshoot) * r, min=0, max=1).detach()

            images[b:b+1, :, :, :] = image

        adv_images = images

        return adv_images


def make_data(n, seed):
    rng = np.random.RandomState(seed)
    x = rng.rand(n, 1, 8, 8).astype(np.float32)
    y = rng.randint(0, 10, size=n)
    return torch.from_numpy(x), torch.from_numpy(y)


def evaluate(model, attack, x, y, batch_size):
    clean_correct, adv_correct, norms = 0, 0, []
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        with torch.no_grad():
            clean_pred = model(xb).argmax(1)
        adv = attack(xb.clone(), yb)
        with torch.no_grad():
            adv_pred = model(adv).argmax(1)
        clean_correct += (clean_pred == yb).sum().item()
        adv_correct += (adv_pred == yb).sum().item()
        norms.extend((adv - xb).flatten(1).norm(dim=1).tolist())
        flipped = (adv_pred != clean_pred).float().mean().item()
        print(f"batch {start // batch_size}: flipped {flipped:.2f}")
    return clean_correct / len(x), adv_correct / len(x), float(np.mean(norms))


def main(argv=None):
    args = get_args(argv)
    torch.manual_seed(args.seed)
    model = SmallNet()
    attack = DeepFool(model, steps=args.steps, overshoot=args.overshoot)
    print(attack)
    x, y = make_data(args.n_samples, args.seed)
    clean_acc, adv_acc, mean_norm = evaluate(model, attack, x, y, args.batch_size)
    print(f"clean acc {clean_acc:.3f} | adv acc {adv_acc:.3f} | mean L2 {mean_norm:.4f}")


if __name__ == "__main__":
    main([])
