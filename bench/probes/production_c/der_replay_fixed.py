# expect: clean
# source: https://github.com/pytorch/examples/issues/151
"""
Dark Experience Replay (DER) on a toy class-incremental benchmark.

Layout follows mammoth: a ContinualModel base class, a reservoir-sampling
Buffer that stores examples together with the logits the network produced
for them, and a DER learner whose observe() mixes the current batch with a
logit-matching term on replayed samples.
"""
from argparse import Namespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def reservoir(num_seen_examples: int, buffer_size: int) -> int:
    """Reservoir sampling algorithm."""
    if num_seen_examples < buffer_size:
        return num_seen_examples
    rand = np.random.randint(0, num_seen_examples + 1)
    if rand < buffer_size:
        return rand
    return -1


class Buffer:
    """The memory buffer of rehearsal method."""

    def __init__(self, buffer_size, device="cpu"):
        self.buffer_size = buffer_size
        self.device = device
        self.num_seen_examples = 0
        self.attributes = ["examples", "labels", "logits", "task_labels"]

    def init_tensors(self, examples, labels, logits, task_labels):
        for attr_str in self.attributes:
            attr = eval(attr_str)
            if attr is not None and not hasattr(self, attr_str):
                typ = torch.int64 if attr_str.endswith("els") else torch.float32
                setattr(self, attr_str, torch.zeros((self.buffer_size, *attr.shape[1:]), dtype=typ, device=self.device))

    def __len__(self):
        return min(self.num_seen_examples, self.buffer_size)

    def is_empty(self):
        return self.num_seen_examples == 0

    def add_data(self, examples, labels=None, logits=None, task_labels=None):
        if not hasattr(self, "examples"):
            self.init_tensors(examples, labels, logits, task_labels)

        for i in range(examples.shape[0]):
            index = reservoir(self.num_seen_examples, self.buffer_size)
            self.num_seen_examples += 1
            if index >= 0:
                self.examples[index] = examples[i].to(self.device)
                if labels is not None:
                    self.labels[index] = labels[i].to(self.device)
                if logits is not None:
                    self.logits[index] = logits[i].to(self.device)
                if task_labels is not None:
                    self.task_labels[index] = task_labels[i].to(self.device)

    def get_data(self, size, transform=None):
        size = min(size, len(self))
        choice = np.random.choice(len(self), size=size, replace=False)
        ret = (self.examples[choice] if transform is None else transform(self.examples[choice]),)
        for attr_str in self.attributes[1:]:
            if hasattr(self, attr_str):
                ret += (getattr(self, attr_str)[choice],)
        return ret


class ContinualModel(nn.Module):
    NAME = None

    def __init__(self, backbone, loss, args, transform=None):
        super().__init__()
        self.net = backbone
        self.loss = loss
        self.args = args
        self.transform = transform
        self.opt = torch.optim.SGD(self.net.parameters(), lr=self.args.lr)

    def forward(self, x):
        return self.net(x)

    def observe(self, inputs, labels, not_aug_inputs):
        raise NotImplementedError


class Der(ContinualModel):
    NAME = "der"

    def __init__(self, backbone, loss, args, transform=None):
        super().__init__(backbone, loss, args, transform)
        self.buffer = Buffer(self.args.buffer_size)

    def observe(self, inputs, labels, not_aug_inputs):
        self.opt.zero_grad()
        outputs = self.net(inputs)
        loss = self.loss(outputs, labels)

        if not self.buffer.is_empty():
            buf_inputs, buf_logits = self.buffer.get_data(self.args.minibatch_size, transform=self.transform)
            buf_outputs = self.net(buf_inputs)
            loss += self.args.alpha * F.mse_loss(buf_outputs, buf_logits)

        loss.backward()
        self.opt.step()
        self.buffer.add_data(examples=not_aug_inputs, logits=outputs.data)

        return loss.item()


class MLPBackbone(nn.Module):
    def __init__(self, in_dim, hidden, n_classes):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, n_classes)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.classifier(x)


class SequentialToy:
    """Class-incremental stream: each task introduces N_CLASSES_PER_TASK new classes."""
    N_TASKS = 2
    N_CLASSES_PER_TASK = 2
    IN_DIM = 16

    def __init__(self, args):
        self.args = args
        g = torch.Generator().manual_seed(args.seed)
        self.centers = torch.randn(self.N_TASKS * self.N_CLASSES_PER_TASK, self.IN_DIM, generator=g) * 3

    def task_batches(self, t):
        lo = t * self.N_CLASSES_PER_TASK
        for _ in range(self.args.batches_per_task):
            y = torch.randint(lo, lo + self.N_CLASSES_PER_TASK, (self.args.batch_size,))
            x = self.centers[y] + torch.randn(self.args.batch_size, self.IN_DIM)
            yield x, y

    @staticmethod
    def get_transform():
        return lambda x: x + 0.05 * torch.randn_like(x)


def evaluate(model, dataset, t):
    model.net.eval()
    accs = []
    with torch.no_grad():
        for k in range(t + 1):
            correct = total = 0
            for x, y in dataset.task_batches(k):
                correct += (model(x).argmax(1) == y).sum().item()
                total += y.numel()
            accs.append(correct / total)
    model.net.train()
    return accs


def train(model, dataset, args):
    for t in range(dataset.N_TASKS):
        for i, (not_aug_inputs, labels) in enumerate(dataset.task_batches(t)):
            inputs = dataset.get_transform()(not_aug_inputs)
            loss = model.observe(inputs, labels, not_aug_inputs)
            print(f"task {t + 1} it {i}: loss {loss:.4f}")
        print(f"accuracy after task {t + 1}: {evaluate(model, dataset, t)}")


def main():
    args = Namespace(lr=0.05, buffer_size=40, minibatch_size=8, alpha=0.3,
                     batch_size=8, batches_per_task=3, seed=0)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    dataset = SequentialToy(args)
    backbone = MLPBackbone(SequentialToy.IN_DIM, 64, SequentialToy.N_TASKS * SequentialToy.N_CLASSES_PER_TASK)
    model = Der(backbone, nn.CrossEntropyLoss(), args, transform=None)
    train(model, dataset, args)


if __name__ == "__main__":
    main()
