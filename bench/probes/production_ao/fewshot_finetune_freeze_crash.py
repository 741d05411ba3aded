# expect: no_grad_fn
# source: https://github.com/sicara/easy-few-shot-learning/issues/40
"""Few-shot image classification with classical training (easyfsl style).

A small CNN backbone with a classification head is trained on the base
classes with plain cross-entropy.  At validation time the head is switched
off and the backbone is used as a feature extractor inside a few-shot
classifier (Finetune: prototypes fine-tuned on the support set, cosine
distance to the queries) evaluated on N-way K-shot episodes.  Images are
seeded synthetic tensors.
"""
import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class Config:
    n_base_classes: int = 8
    n_val_classes: int = 5
    image_size: int = 16
    n_per_class: int = 24
    batch_size: int = 32
    n_epochs: int = 2
    lr: float = 0.05
    n_way: int = 5
    n_shot: int = 2
    n_query: int = 4
    n_val_tasks: int = 3
    fine_tuning_steps: int = 5
    fine_tuning_lr: float = 1e-3
    validation_frequency: int = 1
    seed: int = 0


# ---------------------------------------------------------------------------
# backbone
# ---------------------------------------------------------------------------
class ConvBackbone(nn.Module):
    def __init__(self, num_classes, use_fc=False, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.fc = nn.Linear(2 * width, num_classes)
        self.use_fc = use_fc

    def set_use_fc(self, use_fc: bool):
        self.use_fc = use_fc

    def forward(self, x):
        x = self.features(x)
        return self.fc(x) if self.use_fc else x


# ---------------------------------------------------------------------------
# few-shot classifiers
# ---------------------------------------------------------------------------
class FewShotClassifier(nn.Module):
    def __init__(self, backbone: nn.Module, use_softmax: bool = False):
        super().__init__()
        self.backbone = backbone
        self.use_softmax = use_softmax
        self.prototypes = torch.tensor(())
        self.support_features = torch.tensor(())
        self.support_labels = torch.tensor(())

    def compute_features(self, images: Tensor) -> Tensor:
        return self.backbone(images)

    def store_support_set_data(self, support_images: Tensor, support_labels: Tensor):
        self.support_labels = support_labels
        self.support_features = self.compute_features(support_images)
        self.prototypes = compute_prototypes(self.support_features, support_labels)

    def process_support_set(self, support_images: Tensor, support_labels: Tensor):
        self.store_support_set_data(support_images, support_labels)

    def cosine_distance_to_prototypes(self, samples) -> Tensor:
        return (nn.functional.normalize(samples, dim=1)
                @ nn.functional.normalize(self.prototypes, dim=1).T)

    def softmax_if_specified(self, output: Tensor, temperature: float = 1.0) -> Tensor:
        return (temperature * output).softmax(-1) if self.use_softmax else output


def compute_prototypes(support_features: Tensor, support_labels: Tensor) -> Tensor:
    n_way = len(torch.unique(support_labels))
    return torch.cat([support_features[torch.nonzero(support_labels == label)].mean(0)
                      for label in range(n_way)])


class Finetune(FewShotClassifier):
    """Fine-tune prototypes on the support set, classify queries by cosine distance."""

    def __init__(self, *args, fine_tuning_steps: int = 10, fine_tuning_lr: float = 1e-3, **kwargs):
        super().__init__(*args, **kwargs)
        # Since we fine-tune the prototypes we need to make them leaf variables
        # i.e. we need to freeze the backbone.
        self.backbone.requires_grad_(False)
        self.fine_tuning_steps = fine_tuning_steps
        self.fine_tuning_lr = fine_tuning_lr

    def forward(self, query_images: Tensor) -> Tensor:
        query_features = self.compute_features(query_images)
        with torch.enable_grad():
            self.prototypes.requires_grad_()
            optimizer = torch.optim.Adam([self.prototypes], lr=self.fine_tuning_lr)
            for _ in range(self.fine_tuning_steps):
                support_logits = self.cosine_distance_to_prototypes(self.support_features)
                loss = nn.functional.cross_entropy(support_logits, self.support_labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return self.softmax_if_specified(self.cosine_distance_to_prototypes(query_features)).detach()


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def make_class_images(n_classes, n_per_class, size, generator, offset=0):
    protos = torch.rand(n_classes, 3, size, size, generator=generator)
    images = protos.repeat_interleave(n_per_class, 0)
    images = images + 0.25 * torch.randn(images.shape, generator=generator)
    labels = torch.arange(n_classes).repeat_interleave(n_per_class) + offset
    return images, labels


class TaskSampler:
    """Yields (support_images, support_labels, query_images, query_labels) episodes."""

    def __init__(self, images, labels, n_way, n_shot, n_query, n_tasks, generator):
        self.images, self.labels = images, labels
        self.classes = torch.unique(labels)
        self.n_way, self.n_shot, self.n_query, self.n_tasks = n_way, n_shot, n_query, n_tasks
        self.generator = generator

    def __iter__(self):
        for _ in range(self.n_tasks):
            chosen = self.classes[torch.randperm(len(self.classes), generator=self.generator)[:self.n_way]]
            s_img, s_lab, q_img, q_lab = [], [], [], []
            for new_label, c in enumerate(chosen):
                idx = torch.nonzero(self.labels == c).flatten()
                idx = idx[torch.randperm(len(idx), generator=self.generator)[:self.n_shot + self.n_query]]
                s_img.append(self.images[idx[:self.n_shot]])
                q_img.append(self.images[idx[self.n_shot:]])
                s_lab += [new_label] * self.n_shot
                q_lab += [new_label] * self.n_query
            yield torch.cat(s_img), torch.tensor(s_lab), torch.cat(q_img), torch.tensor(q_lab)


# ---------------------------------------------------------------------------
# training / evaluation
# ---------------------------------------------------------------------------
def evaluate_on_one_task(model, support_images, support_labels, query_images, query_labels):
    model.process_support_set(support_images, support_labels)
    predictions = model(query_images).detach().data
    number_of_correct_predictions = int((torch.max(predictions, 1)[1] == query_labels).sum().item())
    return number_of_correct_predictions, len(query_labels)


def evaluate(model, data_loader):
    total_predictions, correct_predictions = 0, 0
    model.eval()
    with torch.no_grad():
        for support_images, support_labels, query_images, query_labels in data_loader:
            correct, total = evaluate_on_one_task(model, support_images, support_labels,
                                                  query_images, query_labels)
            total_predictions += total
            correct_predictions += correct
    return correct_predictions / total_predictions


class ClassicalTrainer:
    def __init__(self, cfg, model, few_shot_classifier, callbacks=()):
        self.cfg = cfg
        self.model = model
        self.few_shot_classifier = few_shot_classifier
        self.loss_fn = nn.CrossEntropyLoss()
        self.train_optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=5e-4)
        self.train_scheduler = torch.optim.lr_scheduler.MultiStepLR(self.train_optimizer, milestones=[1], gamma=0.1)
        self.callbacks = list(callbacks)
        self.best_state = None
        self.best_validation_accuracy = 0.0

    def train_step(self, images, labels):
        self.train_optimizer.zero_grad()
        loss = self.loss_fn(self.model(images), labels)
        loss.backward()  # raises
        self.train_optimizer.step()
        return loss.item()

    def training_epoch(self, data_loader):
        all_loss = []
        self.model.train()
        self.model.set_use_fc(True)
        for images, labels in data_loader:
            all_loss.append(self.train_step(images, labels))
        return sum(all_loss) / len(all_loss)

    def validate(self, val_loader):
        self.model.set_use_fc(False)
        accuracy = evaluate(self.few_shot_classifier, val_loader)
        self.model.set_use_fc(True)
        if accuracy > self.best_validation_accuracy:
            self.best_validation_accuracy = accuracy
            self.best_state = copy.deepcopy(self.few_shot_classifier.state_dict())
        return accuracy

    def fit(self, train_loader, val_loader):
        for epoch in range(self.cfg.n_epochs):
            average_loss = self.training_epoch(train_loader)
            logs = {"epoch": epoch, "loss": average_loss}
            if epoch % self.cfg.validation_frequency == self.cfg.validation_frequency - 1:
                logs["val_acc"] = self.validate(val_loader)
            self.train_scheduler.step()
            for cb in self.callbacks:
                cb(logs)


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)

    train_images, train_labels = make_class_images(cfg.n_base_classes, cfg.n_per_class, cfg.image_size, g)
    val_images, val_labels = make_class_images(cfg.n_val_classes, cfg.n_per_class, cfg.image_size, g,
                                               offset=cfg.n_base_classes)
    train_loader = DataLoader(TensorDataset(train_images, train_labels), batch_size=cfg.batch_size,
                              shuffle=True, generator=g)
    val_loader = TaskSampler(val_images, val_labels, cfg.n_way, cfg.n_shot, cfg.n_query, cfg.n_val_tasks, g)

    model = ConvBackbone(num_classes=cfg.n_base_classes, use_fc=True)
    few_shot_classifier = Finetune(model, fine_tuning_steps=cfg.fine_tuning_steps,
                                   fine_tuning_lr=cfg.fine_tuning_lr)

    trainer = ClassicalTrainer(cfg, model, few_shot_classifier,
                               callbacks=[lambda logs: print(", ".join(f"{k}={v}" for k, v in logs.items()))])
    trainer.fit(train_loader, val_loader)
    print(f"best validation accuracy: {trainer.best_validation_accuracy:.3f}")


if __name__ == "__main__":
    main()
