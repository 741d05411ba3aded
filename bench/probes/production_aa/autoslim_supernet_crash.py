# expect: freed_graph
# source: https://github.com/open-mmlab/mmrazor/issues/485
"""AutoSlim supernet pre-training (mmrazor-style, CPU, synthetic images).

A slimmable CNN whose convolution / linear layers carry channel masks, a
RatioPruner that switches the supernet to its max / min / random widths, a
SelfDistiller that records teacher (max width) and student outputs through
forward hooks and computes an in-place distillation loss, and an AutoSlim
algorithm whose `train_step` follows the sandwich rule: max, min and
(num_sample_training - 2) random subnets, one backward each, one optimizer
step.  Configs are mmcv-style nested dicts.
"""
import copy
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = dict(
    model=dict(
        type='AutoSlim',
        num_sample_training=4,
        architecture=dict(type='SlimmableCNN', widths=(16, 32), num_classes=10),
        distiller=dict(
            type='SelfDistiller',
            components=[dict(student_module='head', teacher_module='head',
                             losses=[dict(type='KLDivergence', name='loss_kd', tau=1.0, loss_weight=1.0)])]),
        pruner=dict(type='RatioPruner', ratios=(2 / 8, 3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0))),
    optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-4),
    lr_config=dict(policy='CosineAnnealing', T_max=4),
    data=dict(samples_per_gpu=8, num_batches=3),
    total_epochs=1,
    seed=0,
)


class SlimmableConv2d(nn.Conv2d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer('out_mask', torch.ones(1, self.out_channels, 1, 1))

    def forward(self, x):
        return super().forward(x) * self.out_mask


class SlimmableCNN(nn.Module):
    def __init__(self, widths=(16, 32), num_classes=10):
        super().__init__()
        self.conv1 = SlimmableConv2d(3, widths[0], 3, padding=1)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.conv2 = SlimmableConv2d(widths[0], widths[1], 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(widths[1])
        self.head = nn.Linear(widths[1], num_classes)

    def forward(self, img):
        x = F.relu(self.bn1(self.conv1(img)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class RatioPruner(object):
    def __init__(self, ratios):
        self.ratios = ratios

    def prepare_from_supernet(self, supernet):
        self.channel_spaces = [
            m for m in supernet.modules() if isinstance(m, SlimmableConv2d)]
        self.supernet = supernet

    def _set_ratio(self, ratios):
        for m, r in zip(self.channel_spaces, ratios):
            keep = max(1, int(round(m.out_channels * r)))
            m.out_mask.zero_()
            m.out_mask[:, :keep] = 1.0

    def set_max_channel(self):
        self._set_ratio([1.0] * len(self.channel_spaces))

    def set_min_channel(self):
        self._set_ratio([self.ratios[0]] * len(self.channel_spaces))

    def sample_subnet(self):
        return [random.choice(self.ratios) for _ in self.channel_spaces]

    def set_subnet(self, subnet_dict):
        self._set_ratio(subnet_dict)


class KLDivergence(nn.Module):
    def __init__(self, tau=1.0, loss_weight=1.0):
        super().__init__()
        self.tau = tau
        self.loss_weight = loss_weight

    def forward(self, preds_S, preds_T):
        softmax_pred_T = F.softmax(preds_T / self.tau, dim=1)
        logsoftmax_preds_S = F.log_softmax(preds_S / self.tau, dim=1)
        loss = (self.tau ** 2) * F.kl_div(logsoftmax_preds_S, softmax_pred_T, reduction='batchmean')
        return self.loss_weight * loss


class SelfDistiller(nn.Module):
    def __init__(self, components):
        super().__init__()
        self.components = components
        self.losses = nn.ModuleDict()
        for comp in components:
            for loss_cfg in comp['losses']:
                c = dict(loss_cfg)
                c.pop('type')
                name = c.pop('name')
                self.losses[name] = KLDivergence(**c)
        self.teacher_outputs, self.student_outputs = {}, {}
        self._mode = None

    def prepare_from_student(self, student):
        modules = dict(student.named_modules())
        for comp in self.components:
            modules[comp['teacher_module']].register_forward_hook(self._make_hook(comp['teacher_module']))

    def _make_hook(self, name):
        def hook(module, inputs, output):
            if self._mode == 'teacher':
                self.teacher_outputs.setdefault(name, []).append(output)
            elif self._mode == 'student':
                self.student_outputs.setdefault(name, []).append(output)
        return hook

    def reset_outputs(self, outputs):
        for key in list(outputs.keys()):
            outputs[key] = []

    def exec_teacher_forward(self, teacher, data):
        self.reset_outputs(self.teacher_outputs)
        self._mode = 'teacher'
        logits = teacher(data['img'])
        self._mode = None
        return dict(loss_cls=F.cross_entropy(logits, data['gt_label']))

    def exec_student_forward(self, student, data):
        self.reset_outputs(self.student_outputs)
        self._mode = 'student'
        out = student(data['img'])
        self._mode = None
        return out

    def compute_distill_loss(self, data=None):
        losses = dict()
        for comp in self.components:
            s_out = self.student_outputs[comp['student_module']][0]
            t_out = self.teacher_outputs[comp['teacher_module']][0]
            for loss_cfg in comp['losses']:
                losses[loss_cfg['name']] = self.losses[loss_cfg['name']](s_out, t_out)
        return losses


def add_prefix(inputs, prefix):
    return {'{}.{}'.format(prefix, k): v for k, v in inputs.items()}


class AutoSlim(nn.Module):
    def __init__(self, architecture, distiller, pruner, num_sample_training=4):
        super().__init__()
        assert num_sample_training >= 2, 'num_sample_training should be no less than 2'
        arch = dict(architecture); arch.pop('type')
        self.architecture = SlimmableCNN(**arch)
        dist = dict(distiller); dist.pop('type')
        self.distiller = SelfDistiller(**dist)
        self.distiller.prepare_from_student(self.architecture)
        prn = dict(pruner); prn.pop('type')
        self.pruner = RatioPruner(**prn)
        self.pruner.prepare_from_supernet(self.architecture)
        self.num_sample_training = num_sample_training

    @staticmethod
    def _parse_losses(losses):
        log_vars = {k: v.mean() for k, v in losses.items()}
        loss = sum(v for k, v in log_vars.items() if 'loss' in k)
        return loss, {k: v.item() for k, v in log_vars.items()}

    def train_step(self, data, optimizer):
        optimizer.zero_grad()
        losses = dict()

        self.pruner.set_max_channel()
        max_model_losses = self.distiller.exec_teacher_forward(self.architecture, data)
        losses.update(add_prefix(max_model_losses, 'max_model'))
        max_model_loss, _ = self._parse_losses(max_model_losses)
        max_model_loss.backward()

        self.pruner.set_min_channel()
        self.distiller.exec_student_forward(self.architecture, data)
        min_model_losses = self.distiller.compute_distill_loss(data)
        losses.update(add_prefix(min_model_losses, 'min_model'))
        min_model_loss, _ = self._parse_losses(min_model_losses)
        min_model_loss.backward()  # raises

        for i in range(self.num_sample_training - 2):
            self.pruner.set_subnet(self.pruner.sample_subnet())
            self.distiller.exec_student_forward(self.architecture, data)
            model_losses = self.distiller.compute_distill_loss(data)
            losses.update(add_prefix(model_losses, 'prune_model{}_distiller'.format(i + 1)))
            model_loss, _ = self._parse_losses(model_losses)
            model_loss.backward()

        optimizer.step()
        loss, log_vars = self._parse_losses(losses)
        return dict(loss=loss, log_vars=log_vars, num_samples=len(data['img']))

    @torch.no_grad()
    def simple_test(self, data):
        self.pruner.set_max_channel()
        return (self.architecture(data['img']).argmax(1) == data['gt_label']).float().mean().item()


class EpochBasedRunner(object):
    def __init__(self, model, optimizer, scheduler, cfg):
        self.model, self.optimizer, self.scheduler, self.cfg = model, optimizer, scheduler, cfg
        g = torch.Generator().manual_seed(cfg['seed'])
        n = cfg['data']['samples_per_gpu'] * cfg['data']['num_batches']
        self.images = torch.randn(n, 3, 16, 16, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def data_loader(self):
        bs = self.cfg['data']['samples_per_gpu']
        for i in range(0, len(self.images), bs):
            yield dict(img=self.images[i:i + bs], gt_label=self.labels[i:i + bs])

    def run(self):
        for epoch in range(self.cfg['total_epochs']):
            self.model.train()
            for i, data in enumerate(self.data_loader()):
                outputs = self.model.train_step(data, self.optimizer)
                print('Epoch [{}][{}] {}'.format(epoch + 1, i + 1, outputs['log_vars']))
            self.scheduler.step()
            self.model.eval()
            print('accuracy_top-1', self.model.simple_test(next(self.data_loader())))


def main():
    random.seed(cfg['seed'])
    torch.manual_seed(cfg['seed'])
    model_cfg = copy.deepcopy(cfg['model'])
    model_cfg.pop('type')
    model = AutoSlim(**model_cfg)
    opt_cfg = dict(cfg['optimizer']); opt_cfg.pop('type')
    optimizer = torch.optim.SGD(model.parameters(), **opt_cfg)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg['lr_config']['T_max'])
    EpochBasedRunner(model, optimizer, scheduler, cfg).run()


if __name__ == '__main__':
    main()
