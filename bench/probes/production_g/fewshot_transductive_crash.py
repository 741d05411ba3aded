# expect: no_grad_fn
# source: https://github.com/sicara/easy-few-shot-learning/issues/55
"""Few-shot image classification: classical pre-training, few-shot evaluation.

Following the easyfsl "classical training" recipe, a backbone with a linear
head is trained with cross-entropy on the base classes; it is then used as a
feature extractor by a few-shot classifier (transductive fine-tuning of the
prototypes) on episodes drawn from held-out novel classes.
"""
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

cfg = SimpleNamespace(
    method="transductive_finetuning",
    n_base_classes=8, n_novel_classes=6, images_per_class=30, image_size=16,
    n_way=3, n_shot=2, n_query=4, n_eval_tasks=4,
    n_epochs=2, batch_size=32, lr=0.05, momentum=0.9, weight_decay=5e-4,
    fine_tuning_steps=10, fine_tuning_lr=1e-2, seed=4,
)


class Conv4(nn.Module):
    def __init__(self, num_classes, width=32, use_fc=True):
        super().__init__()
        layers, c = [], 3
        for _ in range(3):
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)]
            c = width
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(width, num_classes)
        self.use_fc = use_fc

    def set_use_fc(self, use_fc):
        self.use_fc = use_fc

    def forward(self, x):
        x = self.features(x)
        return self.fc(x) if self.use_fc else x


def compute_prototypes(support_features, support_labels):
    n_way = len(torch.unique(support_labels))
    return torch.cat([support_features[torch.nonzero(support_labels == label)].mean(0)
                      for label in range(n_way)])


def entropy(logits):
    probs = logits.softmax(-1)
    return (-(probs * (probs + 1e-12).log()).sum(dim=1)).mean()


class FewShotClassifier(nn.Module):
    def __init__(self, backbone, use_softmax=False):
        super().__init__()
        self.backbone = backbone
        self.use_softmax = use_softmax
        self.prototypes = torch.tensor(())
        self.support_features = torch.tensor(())
        self.support_labels = torch.tensor(())

    def process_support_set(self, support_images, support_labels):
        self.support_labels = support_labels
        self.support_features = self.backbone(support_images)
        self.prototypes = compute_prototypes(self.support_features, support_labels)

    def l2_distance_to_prototypes(self, samples):
        return -torch.cdist(samples, self.prototypes)

    def softmax_if_specified(self, output):
        return output.softmax(-1) if self.use_softmax else output


class PrototypicalNetworks(FewShotClassifier):
    def forward(self, query_images):
        query_features = self.backbone(query_images)
        return self.softmax_if_specified(self.l2_distance_to_prototypes(query_features))


class Finetune(FewShotClassifier):
    def __init__(self, *args, fine_tuning_steps=10, fine_tuning_lr=1e-3, **kwargs):
        super().__init__(*args, **kwargs)
        # prototypes are fine-tuned as leaf variables, so the backbone stays frozen
        self.backbone.requires_grad_(False)
        self.fine_tuning_steps = fine_tuning_steps
        self.fine_tuning_lr = fine_tuning_lr


class TransductiveFinetuning(Finetune):
    def forward(self, query_images: Tensor) -> Tensor:
        query_features = self.backbone.forward(query_images)
        with torch.enable_grad():
            self.prototypes.requires_grad_()
            optimizer = torch.optim.Adam([self.prototypes], lr=self.fine_tuning_lr)
            for _ in range(self.fine_tuning_steps):
                support_ce = F.cross_entropy(self.l2_distance_to_prototypes(self.support_features),
                                             self.support_labels)
                query_entropy = entropy(self.l2_distance_to_prototypes(query_features))
                loss = support_ce + query_entropy
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return self.softmax_if_specified(self.l2_distance_to_prototypes(query_features)).detach()


def build_few_shot_classifier(backbone, cfg):
    if cfg.method == "transductive_finetuning":
        return TransductiveFinetuning(backbone, fine_tuning_steps=cfg.fine_tuning_steps,
                                      fine_tuning_lr=cfg.fine_tuning_lr)
    return PrototypicalNetworks(backbone)


class SyntheticImages:
    def __init__(self, n_classes, cfg, gen):
        self.templates = torch.randn(n_classes, 3, cfg.image_size, cfg.image_size, generator=gen)
        self.labels = torch.arange(n_classes).repeat_interleave(cfg.images_per_class)
        noise = torch.randn(len(self.labels), 3, cfg.image_size, cfg.image_size, generator=gen)
        self.images = self.templates[self.labels] + 0.9 * noise

    def batches(self, batch_size, gen):
        order = torch.randperm(len(self.labels), generator=gen)
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            yield self.images[idx], self.labels[idx]

    def sample_task(self, n_way, n_shot, n_query, rng):
        classes = rng.sample(sorted(set(self.labels.tolist())), n_way)
        s_img, s_lab, q_img, q_lab = [], [], [], []
        for new_label, c in enumerate(classes):
            idx = torch.nonzero(self.labels == c).squeeze(1)[torch.randperm(int((self.labels == c).sum()))]
            s_img.append(self.images[idx[:n_shot]])
            q_img.append(self.images[idx[n_shot:n_shot + n_query]])
            s_lab += [new_label] * n_shot
            q_lab += [new_label] * n_query
        return torch.cat(s_img), torch.tensor(s_lab), torch.cat(q_img), torch.tensor(q_lab)


def training_epoch(model, data, optimizer, cfg, gen):
    all_loss = []
    model.train()
    for images, labels in data.batches(cfg.batch_size, gen):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()  # raises
        optimizer.step()
        all_loss.append(loss.item())
    return float(np.mean(all_loss))


def evaluate(classifier, data, cfg, rng):
    classifier.backbone.set_use_fc(False)
    classifier.eval()
    correct, total = 0, 0
    for _ in range(cfg.n_eval_tasks):
        s_img, s_lab, q_img, q_lab = data.sample_task(cfg.n_way, cfg.n_shot, cfg.n_query, rng)
        with torch.no_grad():
            classifier.process_support_set(s_img, s_lab)
            preds = classifier(q_img).argmax(-1)
        correct += (preds == q_lab).sum().item()
        total += len(q_lab)
    classifier.backbone.set_use_fc(True)
    return correct / total


def main(cfg):
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    base = SyntheticImages(cfg.n_base_classes, cfg, gen)
    novel = SyntheticImages(cfg.n_novel_classes, cfg, gen)
    model = Conv4(num_classes=cfg.n_base_classes)
    few_shot_classifier = build_few_shot_classifier(model, cfg)

    train_optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                      weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(train_optimizer, milestones=[1], gamma=0.1)
    for epoch in range(cfg.n_epochs):
        avg_loss = training_epoch(model, base, train_optimizer, cfg, gen)
        scheduler.step()
        print(f"epoch {epoch}: base-class CE {avg_loss:.4f}")

    acc = evaluate(few_shot_classifier, novel, cfg, rng)
    print(f"{cfg.n_way}-way {cfg.n_shot}-shot accuracy on novel classes: {acc:.3f}")


if __name__ == "__main__":
    main(cfg)
