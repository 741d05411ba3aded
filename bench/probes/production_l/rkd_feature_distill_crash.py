# expect: inplace_version
# source: https://github.com/autogluon/autogluon/pull/1983
"""Knowledge distillation of an image classifier with hard/soft label losses,
an output-feature (MSE) loss through an adaptor, and relational KD (RKD
distance + angle) on the output features.  Loop structure follows a
DistillerLitModule (training_step / validation_step / configure_optimizers)
driven by a tiny trainer instead of Lightning.  Synthetic 16x16 images.
"""
import math
from types import SimpleNamespace
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(7)

LOGITS, FEATURES = "logits", "features"


# ------------------------------------------------------------------ optimization/utils.py
def pdist(embeddings: torch.Tensor, squared: bool = False, eps: float = 1e-12):
    """
    Compute pairwise Euclidean distances between embeddings in n-dimensional space.

    Parameters
    ----------
    embeddings
        The embeddings to compute pairwise distance between. Shape: (N,D)
    squared
        If the result is square of Euclidean distance.
    eps
        Min value of each entry.

    Returns
    -------
    Pairwise Euclidean distances. Shape: (N,N)
    """
    embeddings_square = embeddings.pow(2).sum(dim=1)
    prod = embeddings @ embeddings.t()
    res = (embeddings_square.unsqueeze(1) + embeddings_square.unsqueeze(0) - 2 * prod).clamp(min=eps)

    if not squared:
        res = res.sqrt()

    res[range(len(embeddings)), range(len(embeddings))] = 0

    return res


def get_lr_scheduler(optimizer, num_max_steps, num_warmup_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(max(1, num_max_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


# ------------------------------------------------------------------ optimization/RKDLoss.py
class RKDDistance(nn.Module):
    def forward(self, student: Optional[torch.Tensor], teacher: Optional[torch.Tensor]):
        """
        Compute RKD Distance Loss. Refer to https://github.com/lenscloth/RKD/blob/master/metric/loss.py

        student / teacher: output features, shape (N, D)
        """
        with torch.no_grad():
            t_d = pdist(teacher, squared=False)
            mean_td = t_d[t_d > 0].mean()
            t_d = t_d / mean_td

        d = pdist(student, squared=False)
        mean_d = d[d > 0].mean()
        d = d / mean_d

        return F.smooth_l1_loss(d, t_d)


class RKDAngle(nn.Module):
    def forward(self, student: Optional[torch.Tensor], teacher: Optional[torch.Tensor]):
        with torch.no_grad():
            td = teacher.unsqueeze(0) - teacher.unsqueeze(1)
            norm_td = F.normalize(td, p=2, dim=2)
            t_angle = torch.bmm(norm_td, norm_td.transpose(1, 2)).view(-1)

        sd = student.unsqueeze(0) - student.unsqueeze(1)
        norm_sd = F.normalize(sd, p=2, dim=2)
        s_angle = torch.bmm(norm_sd, norm_sd.transpose(1, 2)).view(-1)

        return F.smooth_l1_loss(s_angle, t_angle)


# ------------------------------------------------------------------ models
class ConvClassifier(nn.Module):
    def __init__(self, prefix, width, num_classes, depth):
        super().__init__()
        self.prefix = prefix
        self.label_key = f"{prefix}_label"
        layers, c = [], 3
        for i in range(depth):
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
            if i % 2 == 1:
                layers.append(nn.MaxPool2d(2))
            c = width
        self.backbone = nn.Sequential(*layers)
        self.out_features = width
        self.head = nn.Linear(width, num_classes)

    def forward(self, batch):
        features = self.backbone(batch["image"]).mean(dim=(2, 3))
        return {self.prefix: {FEATURES: features, LOGITS: self.head(features)}}


def run_model(model, batch):
    return model(batch)


# ------------------------------------------------------------------ lit_distiller.py
class DistillerLitModule(nn.Module):
    def __init__(self, student_model, teacher_model, hparams, output_feature_adaptor,
                 output_feature_loss_func, rkd_distance_loss_func, rkd_angle_loss_func):
        super().__init__()
        self.student_model = student_model
        self.teacher_model = teacher_model
        self.hparams = hparams
        self.output_feature_adaptor = output_feature_adaptor
        self.hard_label_loss_func = nn.CrossEntropyLoss()
        self.soft_label_loss_func = nn.CrossEntropyLoss()
        self.output_feature_loss_func = output_feature_loss_func
        self.rkd_distance_loss_func = rkd_distance_loss_func
        self.rkd_angle_loss_func = rkd_angle_loss_func

    def _compute_hard_label_loss(self, output, label):
        return self.hard_label_loss_func(output[self.student_model.prefix][LOGITS], label)

    def _compute_soft_label_loss(self, student_output, teacher_output):
        T = self.hparams.temperature
        student_logits = student_output[self.student_model.prefix][LOGITS] / T
        soft_labels = F.softmax(teacher_output[self.teacher_model.prefix][LOGITS] / T, dim=-1)
        return self.soft_label_loss_func(student_logits, soft_labels)

    def _compute_output_feature_loss(self, student_output, teacher_output):
        student_result = self.output_feature_adaptor(student_output[self.student_model.prefix][FEATURES])
        teacher_result = teacher_output[self.teacher_model.prefix][FEATURES]
        loss = self.output_feature_loss_func(input=student_result, target=teacher_result)
        loss_distance = self.rkd_distance_loss_func(student_result, teacher_result)
        loss_angle = self.rkd_angle_loss_func(student_result, teacher_result)
        return (loss, loss_distance, loss_angle)

    def _compute_loss(self, student_output, teacher_output, label):
        hp = self.hparams
        loss = self._compute_hard_label_loss(student_output, label) * hp.hard_label_weight
        if hp.soft_label_weight > 0:
            loss += self._compute_soft_label_loss(student_output, teacher_output) * hp.soft_label_weight
        if hp.output_feature_loss_weight > 0:
            mse, rkd_d, rkd_a = self._compute_output_feature_loss(student_output, teacher_output)
            loss += mse * hp.output_feature_loss_weight
            loss += rkd_d * hp.rkd_distance_loss_weight + rkd_a * hp.rkd_angle_loss_weight
        return loss

    def _shared_step(self, batch):
        student_output = run_model(self.student_model, batch)
        self.teacher_model.eval()
        with torch.no_grad():
            teacher_output = run_model(self.teacher_model, batch)
        loss = self._compute_loss(student_output, teacher_output, batch[self.student_model.label_key])
        return student_output, loss

    def training_step(self, batch, batch_idx):
        _, loss = self._shared_step(batch)
        return loss

    @torch.no_grad()
    def validation_step(self, batch, batch_idx):
        student_output, loss = self._shared_step(batch)
        pred = student_output[self.student_model.prefix][LOGITS].argmax(-1)
        return loss, (pred == batch[self.student_model.label_key]).float().mean()

    def configure_optimizers(self, max_steps):
        params = list(self.student_model.parameters()) + list(self.output_feature_adaptor.parameters())
        optimizer = torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        scheduler = get_lr_scheduler(optimizer, max_steps, int(self.hparams.warmup_steps * max_steps))
        return optimizer, scheduler


# ------------------------------------------------------------------ trainer / data
def make_loader(n_batches, batch_size, num_classes, prefix):
    protos = torch.randn(num_classes, 3, 16, 16)
    batches = []
    for _ in range(n_batches):
        y = torch.randint(0, num_classes, (batch_size,))
        x = protos[y] + 0.5 * torch.randn(batch_size, 3, 16, 16)
        batches.append({"image": x, f"{prefix}_label": y})
    return batches


def fit(module, train_loader, val_loader, max_epochs):
    max_steps = max_epochs * len(train_loader)
    optimizer, scheduler = module.configure_optimizers(max_steps)
    for epoch in range(max_epochs):
        module.student_model.train()
        for batch_idx, batch in enumerate(train_loader):
            loss = module.training_step(batch, batch_idx)
            optimizer.zero_grad()
            loss.backward()  # raises
            optimizer.step()
            scheduler.step()
        module.student_model.eval()
        stats = [module.validation_step(b, i) for i, b in enumerate(val_loader)]
        val_loss = torch.stack([s[0] for s in stats]).mean().item()
        val_acc = torch.stack([s[1] for s in stats]).mean().item()
        print(f"epoch {epoch}: train_loss={loss.item():.4f} val_loss={val_loss:.4f} val_acc={val_acc:.3f}")


if __name__ == "__main__":
    hparams = SimpleNamespace(hard_label_weight=0.2, soft_label_weight=50.0, temperature=5.0,
                              output_feature_loss_weight=0.01, rkd_distance_loss_weight=25.0,
                              rkd_angle_loss_weight=50.0, lr=1e-3, weight_decay=1e-3, warmup_steps=0.1)
    num_classes = 5
    teacher = ConvClassifier("timm_image", width=32, num_classes=num_classes, depth=4)
    student = ConvClassifier("timm_image", width=16, num_classes=num_classes, depth=2)
    adaptor = nn.Linear(student.out_features, teacher.out_features)
    module = DistillerLitModule(student, teacher, hparams, adaptor, nn.MSELoss(), RKDDistance(), RKDAngle())
    train_loader = make_loader(6, 16, num_classes, student.prefix)
    val_loader = make_loader(2, 16, num_classes, student.prefix)
    fit(module, train_loader, val_loader, max_epochs=2)
