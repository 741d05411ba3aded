# expect: inplace_version
# source: https://github.com/ShuaiChenBIGR/MASSL-segmentation-framework/issues/1
"""Mean Teacher semi-supervised training (Tarvainen & Valpola, 2017) on toy data.

The student is run once on the concatenated labeled + unlabeled batch (so that
BatchNorm sees both), the teacher is an EMA of the student. Optimisation is
done in two phases per iteration: a labeled phase on the supervised loss and
an unlabeled phase on the consistency loss.
"""
import copy
import logging

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LOG = logging.getLogger("mean_teacher")


class Config:
    input_dim = 24
    num_classes = 3
    labeled_batch = 8
    unlabeled_batch = 24
    iterations = 5
    lr = 0.05
    momentum = 0.9
    nesterov = True
    ema_decay = 0.99
    consistency = 10.0
    consistency_rampup = 5
    input_noise = 0.15
    seed = 3


def sigmoid_rampup(current, rampup_length):
    """Exponential rampup from https://arxiv.org/abs/1610.02242"""
    if rampup_length == 0:
        return 1.0
    current = np.clip(current, 0.0, rampup_length)
    phase = 1.0 - current / rampup_length
    return float(np.exp(-5.0 * phase * phase))


def softmax_mse_loss(input_logits, target_logits):
    """Takes softmax on both sides and returns MSE loss"""
    assert input_logits.size() == target_logits.size()
    input_softmax = F.softmax(input_logits, dim=1)
    target_softmax = F.softmax(target_logits, dim=1)
    num_classes = input_logits.size()[1]
    return F.mse_loss(input_softmax, target_softmax, reduction="sum") / num_classes


class GaussianNoise(nn.Module):
    def __init__(self, std):
        super().__init__()
        self.std = std

    def forward(self, x):
        return x + self.std * torch.randn_like(x) if self.training else x


class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.noise = GaussianNoise(cfg.input_noise)
        self.body = nn.Sequential(
            nn.Linear(cfg.input_dim, 64), nn.BatchNorm1d(64), nn.LeakyReLU(0.1),
            nn.Dropout(0.2),
            nn.Linear(64, 64), nn.BatchNorm1d(64), nn.LeakyReLU(0.1),
        )
        self.fc = nn.Linear(64, cfg.num_classes)

    def forward(self, x):
        return self.fc(self.body(self.noise(x)))


def create_model(cfg, ema=False):
    model = Net(cfg)
    if ema:
        for param in model.parameters():
            param.detach_()
    return model


class TwoStreamSampler:
    """Yields (labeled_x, labeled_y, unlabeled_x) from a fixed Gaussian mixture."""

    def __init__(self, cfg):
        self.cfg = cfg
        rng = np.random.RandomState(cfg.seed)
        self.means = torch.from_numpy(rng.randn(cfg.num_classes, cfg.input_dim).astype(np.float32)) * 2

    def _draw(self, n):
        y = torch.randint(0, self.cfg.num_classes, (n,))
        return self.means[y] + torch.randn(n, self.cfg.input_dim), y

    def __iter__(self):
        while True:
            xl, yl = self._draw(self.cfg.labeled_batch)
            xu, _ = self._draw(self.cfg.unlabeled_batch)
            yield xl, yl, xu


class MeanTeacherTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.student = create_model(cfg)
        self.teacher = create_model(cfg, ema=True)
        self.teacher.load_state_dict(self.student.state_dict())
        self.optimizer = torch.optim.SGD(self.student.parameters(), lr=cfg.lr,
                                         momentum=cfg.momentum, nesterov=cfg.nesterov)
        self.global_step = 0
        self.meters = {"sup": [], "cons": [], "acc": []}

    @property
    def consistency_weight(self):
        return self.cfg.consistency * sigmoid_rampup(self.global_step, self.cfg.consistency_rampup)

    def update_ema_variables(self):
        # Use the true average until the exponential average is more correct
        alpha = min(1 - 1 / (self.global_step + 1), self.cfg.ema_decay)
        with torch.no_grad():
            for ema_param, param in zip(self.teacher.parameters(), self.student.parameters()):
                ema_param.mul_(alpha).add_(param, alpha=1 - alpha)

    def compute_losses(self, xl, yl, xu):
        n_l = xl.shape[0]
        logits = self.student(torch.cat([xl, xu]))
        student_l, student_u = logits[:n_l], logits[n_l:]
        with torch.no_grad():
            teacher_u = self.teacher(xu)
        sup = F.cross_entropy(student_l, yl)
        cons = softmax_mse_loss(student_u, teacher_u) / xu.shape[0]
        acc = (student_l.argmax(1) == yl).float().mean().item()
        return {"sup": sup, "cons": cons, "acc": acc}

    def _optimize(self, losses):
        # labeled phase; keep the graph, the unlabeled phase shares the student forward
        self.optimizer.zero_grad()
        losses["sup"].backward(retain_graph=True)
        self.optimizer.step()

        # unlabeled phase
        self.optimizer.zero_grad()
        (self.consistency_weight * losses["cons"]).backward()  # raises
        self.optimizer.step()

    def train(self, loader):
        self.student.train()
        self.teacher.train()
        for it, (xl, yl, xu) in zip(range(self.cfg.iterations), loader):
            losses = self.compute_losses(xl, yl, xu)
            self._optimize(losses)
            self.global_step += 1
            self.update_ema_variables()
            for k in self.meters:
                self.meters[k].append(float(losses[k]))
            LOG.info("it %d sup %.4f cons %.4f (w=%.3f) acc %.3f", it, self.meters["sup"][-1],
                     self.meters["cons"][-1], self.consistency_weight, self.meters["acc"][-1])


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = Config()
    torch.manual_seed(cfg.seed)
    trainer = MeanTeacherTrainer(cfg)
    trainer.train(iter(TwoStreamSampler(cfg)))
    LOG.info("final teacher/student gap: %.5f", sum(
        (t - s).abs().sum().item() for t, s in zip(trainer.teacher.parameters(), trainer.student.parameters())))


if __name__ == "__main__":
    main()
