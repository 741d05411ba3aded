# expect: clean
# source: https://github.com/adambielski/siamese-triplet/issues/51
"""Metric learning with an online triplet loss and hard-negative mining.

Batches are built by a balanced sampler (n_classes x n_samples); triplets are
mined inside each batch from the current embeddings (hardest negative per
anchor-positive pair, falling back to random violating negatives).  The
embedding network projects onto the unit hypersphere.
"""
import argparse
from itertools import combinations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler


def parse_args():
    p = argparse.ArgumentParser(description="online triplet learning")
    p.add_argument("--n-classes", type=int, default=5)
    p.add_argument("--n-samples", type=int, default=6)
    p.add_argument("--per-class", type=int, default=30)
    p.add_argument("--embedding-dim", type=int, default=8)
    p.add_argument("--margin", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--n-epochs", type=int, default=2)
    p.add_argument("--batches-per-epoch", type=int, default=4)
    p.add_argument("--log-interval", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


def pdist(vectors):
    return -2 * vectors.mm(torch.t(vectors)) + vectors.pow(2).sum(dim=1).view(1, -1) + \
        vectors.pow(2).sum(dim=1).view(-1, 1)


class EmbeddingNet(nn.Module):
    def __init__(self, embedding_dim=2):
        super().__init__()
        self.convnet = nn.Sequential(nn.Conv2d(1, 8, 3), nn.PReLU(), nn.MaxPool2d(2, stride=2),
                                     nn.Conv2d(8, 16, 3), nn.PReLU(), nn.MaxPool2d(2, stride=2))
        self.fc = nn.Sequential(nn.Linear(16 * 2 * 2, 64), nn.PReLU(),
                                nn.Linear(64, 64), nn.PReLU(),
                                nn.Linear(64, embedding_dim))

    def forward(self, x):
        output = self.convnet(x)
        output = output.view(output.size()[0], -1)
        return self.fc(output)

    def get_embedding(self, x):
        return self.forward(x)


class EmbeddingNetL2(EmbeddingNet):
    def forward(self, x):
        output = super(EmbeddingNetL2, self).forward(x)
        output = output / output.pow(2).sum(1, keepdim=True).sqrt()
        return output


class FunctionNegativeTripletSelector:
    def __init__(self, margin, negative_selection_fn):
        self.margin = margin
        self.negative_selection_fn = negative_selection_fn

    def get_triplets(self, embeddings, labels):
        distance_matrix = pdist(embeddings.detach().cpu())
        labels = labels.cpu().numpy()
        triplets = []
        for label in set(labels):
            label_mask = labels == label
            label_indices = np.where(label_mask)[0]
            if len(label_indices) < 2:
                continue
            negative_indices = np.where(np.logical_not(label_mask))[0]
            anchor_positives = np.array(list(combinations(label_indices, 2)))
            ap_distances = distance_matrix[anchor_positives[:, 0], anchor_positives[:, 1]]
            for (a, pos), ap_distance in zip(anchor_positives, ap_distances):
                loss_values = ap_distance - distance_matrix[torch.LongTensor(np.array([a])),
                                                            torch.LongTensor(negative_indices)] + self.margin
                hard_negative = self.negative_selection_fn(loss_values.numpy().ravel())
                if hard_negative is not None:
                    triplets.append([a, pos, negative_indices[hard_negative]])
        if len(triplets) == 0:
            triplets.append([0, 1, int(np.where(labels != labels[0])[0][0])])
        return torch.LongTensor(np.array(triplets))


def hardest_negative(loss_values):
    hard = np.argmax(loss_values)
    return hard if loss_values[hard] > 0 else None


class OnlineTripletLoss(nn.Module):
    def __init__(self, margin, triplet_selector):
        super().__init__()
        self.margin = margin
        self.triplet_selector = triplet_selector

    def forward(self, embeddings, target):
        triplets = self.triplet_selector.get_triplets(embeddings, target)
        ap = (embeddings[triplets[:, 0]] - embeddings[triplets[:, 1]]).pow(2).sum(1)
        an = (embeddings[triplets[:, 0]] - embeddings[triplets[:, 2]]).pow(2).sum(1)
        losses = F.relu(ap - an + self.margin)
        return losses.mean(), len(triplets)


class BalancedBatchSampler:
    def __init__(self, labels, n_classes, n_samples, n_batches, rng):
        self.labels = labels
        self.classes = sorted(set(labels.tolist()))
        self.by_class = {c: np.where(labels.numpy() == c)[0] for c in self.classes}
        self.n_classes, self.n_samples, self.n_batches, self.rng = n_classes, n_samples, n_batches, rng

    def __iter__(self):
        for _ in range(self.n_batches):
            classes = self.rng.choice(self.classes, self.n_classes, replace=False)
            idx = np.concatenate([self.rng.choice(self.by_class[c], self.n_samples, replace=False) for c in classes])
            yield idx

    def __len__(self):
        return self.n_batches


def make_dataset(args):
    g = torch.Generator().manual_seed(args.seed)
    n_total = args.n_classes * 2 * args.per_class
    prototypes = torch.randn(args.n_classes * 2, 1, 14, 14, generator=g)
    labels = torch.arange(args.n_classes * 2).repeat_interleave(args.per_class)
    images = prototypes[labels] + 0.5 * torch.randn(n_total, 1, 14, 14, generator=g)
    return images, labels


def train_epoch(images, labels, sampler, model, loss_fn, optimizer, log_interval):
    model.train()
    losses, total_loss = [], 0.0
    for batch_idx, idx in enumerate(sampler):
        data, target = images[idx], labels[idx]
        optimizer.zero_grad()
        outputs = model(data)
        loss, n_triplets = loss_fn(outputs, target)
        losses.append(loss.item())
        total_loss += loss.item()
        loss.backward()
        optimizer.step()
        if batch_idx % log_interval == 0:
            print(f"  batch {batch_idx}/{len(sampler)}  loss {np.mean(losses):.4f}  triplets {n_triplets}")
            losses = []
    return total_loss / (batch_idx + 1)


def fit(images, labels, sampler, model, loss_fn, optimizer, scheduler, n_epochs, log_interval):
    for epoch in range(n_epochs):
        train_loss = train_epoch(images, labels, sampler, model, loss_fn, optimizer, log_interval)
        scheduler.step()
        print(f"Epoch: {epoch + 1}/{n_epochs}. Train set: Average loss: {train_loss:.4f}")


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    images, labels = make_dataset(args)
    sampler = BalancedBatchSampler(labels, args.n_classes, args.n_samples, args.batches_per_epoch, rng)
    model = EmbeddingNetL2(embedding_dim=args.embedding_dim)
    loss_fn = OnlineTripletLoss(args.margin, FunctionNegativeTripletSelector(args.margin, hardest_negative))
    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4)
    scheduler = lr_scheduler.StepLR(optimizer, 8, gamma=0.1, last_epoch=-1)
    fit(images, labels, sampler, model, loss_fn, optimizer, scheduler, args.n_epochs, args.log_interval)


if __name__ == "__main__":
    main()
