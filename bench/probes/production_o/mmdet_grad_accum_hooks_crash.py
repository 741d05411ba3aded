# expect: freed_graph
# source: https://github.com/open-mmlab/mmcv/issues/1379
"""Single-stage detector trained through an mmcv-1.x style EpochBasedRunner with
gradient accumulation.  Hook / runner / registry code follows mmcv/runner and
mmdet/apis/train.py.
"""
import logging
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
logging.basicConfig(level=logging.INFO, format='%(asctime)s - mmdet - %(levelname)s - %(message)s')
logger = logging.getLogger('mmdet')

# ------------------------------------------------------------ configs
_base_schedule_1x = dict(
    optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=0.0001),
    optimizer_config=dict(grad_clip=None),
    lr_config=dict(policy='step', warmup_iters=4, warmup_ratio=0.001, step=[8, 11]),
    runner=dict(type='EpochBasedRunner', max_epochs=2))
cfg = dict(
    _base_schedule_1x,
    model=dict(num_classes=3, in_channels=3, feat_channels=16, strides=(8,)),
    data=dict(samples_per_gpu=2, num_imgs=8),
    custom_hooks=[dict(type="GradientCumulativeOptimizerHook", cumulative_iters=4)],
)

# ------------------------------------------------------------ mmcv/runner/hooks
HOOKS = {}
PRIORITIES = {'HIGHEST': 0, 'VERY_HIGH': 10, 'HIGH': 30, 'ABOVE_NORMAL': 40, 'NORMAL': 50,
              'BELOW_NORMAL': 60, 'LOW': 70, 'VERY_LOW': 90, 'LOWEST': 100}


def register_module(cls):
    HOOKS[cls.__name__] = cls
    return cls


def build_from_cfg(cfg, registry):
    args = dict(cfg)
    return registry[args.pop('type')](**args)


class Hook:
    def before_run(self, runner): pass
    def before_train_epoch(self, runner): pass
    def before_train_iter(self, runner): pass
    def after_train_iter(self, runner): pass
    def after_train_epoch(self, runner): pass

    def every_n_iters(self, runner, n):
        return (runner.iter + 1) % n == 0 if n > 0 else False

    def is_last_iter(self, runner):
        return runner.iter + 1 == runner.max_iters


@register_module
class OptimizerHook(Hook):
    def __init__(self, grad_clip=None):
        self.grad_clip = grad_clip

    def clip_grads(self, params):
        params = list(filter(lambda p: p.requires_grad and p.grad is not None, params))
        if len(params) > 0:
            return nn.utils.clip_grad_norm_(params, **self.grad_clip)

    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        runner.outputs['loss'].backward()
        if self.grad_clip is not None:
            self.clip_grads(runner.model.parameters())
        runner.optimizer.step()


@register_module
class GradientCumulativeOptimizerHook(OptimizerHook):
    """Optimizer Hook implements multi-iters gradient cumulating."""

    def __init__(self, cumulative_iters=1, **kwargs):
        super(GradientCumulativeOptimizerHook, self).__init__(**kwargs)
        assert isinstance(cumulative_iters, int) and cumulative_iters > 0
        self.cumulative_iters = cumulative_iters
        self.divisible_iters = 0
        self.remainder_iters = 0
        self.initialized = False

    def has_batch_norm(self, module):
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return True
        return any(self.has_batch_norm(m) for m in module.children())

    def _init(self, runner):
        if runner.iter % self.cumulative_iters != 0:
            logger.warning('Resume iter number is not divisible by cumulative_iters in '
                           'GradientCumulativeOptimizerHook, which means the gradient of '
                           'some iters is lost and the result may be influenced slightly.')
        if self.has_batch_norm(runner.model) and self.cumulative_iters > 1:
            logger.warning('GradientCumulativeOptimizerHook may slightly decrease '
                           'performance if the model has BatchNorm layers.')
        residual_iters = runner.max_iters - runner.iter
        self.divisible_iters = residual_iters // self.cumulative_iters * self.cumulative_iters
        self.remainder_iters = residual_iters - self.divisible_iters
        self.initialized = True

    def after_train_iter(self, runner):
        if not self.initialized:
            self._init(runner)
        if runner.iter < self.divisible_iters:
            loss_factor = self.cumulative_iters
        else:
            loss_factor = self.remainder_iters
        loss = runner.outputs['loss']
        loss = loss / loss_factor
        loss.backward()  # raises
        if self.every_n_iters(runner, self.cumulative_iters) or self.is_last_iter(runner):
            if self.grad_clip is not None:
                self.clip_grads(runner.model.parameters())
            runner.optimizer.step()
            runner.optimizer.zero_grad()


@register_module
class StepLrUpdaterHook(Hook):
    def __init__(self, step, warmup_iters=0, warmup_ratio=0.1, gamma=0.1):
        self.step, self.warmup_iters, self.warmup_ratio, self.gamma = step, warmup_iters, warmup_ratio, gamma

    def before_run(self, runner):
        for group in runner.optimizer.param_groups:
            group.setdefault('initial_lr', group['lr'])

    def before_train_iter(self, runner):
        for group in runner.optimizer.param_groups:
            lr = group['initial_lr'] * self.gamma ** sum(runner.epoch >= s for s in self.step)
            if runner.iter < self.warmup_iters:
                k = (1 - runner.iter / self.warmup_iters) * (1 - self.warmup_ratio)
                lr = lr * (1 - k)
            group['lr'] = lr


@register_module
class TextLoggerHook(Hook):
    def after_train_epoch(self, runner):
        logger.info('Epoch [%d] %s', runner.epoch + 1,
                    ', '.join(f'{k}: {v:.4f}' for k, v in runner.log_buffer.items()))


# ------------------------------------------------------------ mmcv/runner/epoch_based_runner.py
class EpochBasedRunner:
    def __init__(self, model, optimizer, max_epochs):
        self.model, self.optimizer = model, optimizer
        self._max_epochs = max_epochs
        self._hooks = []
        self._epoch = self._iter = 0
        self.log_buffer = {}

    epoch = property(lambda self: self._epoch)
    iter = property(lambda self: self._iter)
    max_iters = property(lambda self: self._max_iters)

    def register_hook(self, hook, priority='NORMAL'):
        hook.priority = PRIORITIES[priority]
        inserted = False
        for i in range(len(self._hooks) - 1, -1, -1):
            if hook.priority >= self._hooks[i].priority:
                self._hooks.insert(i + 1, hook)
                inserted = True
                break
        if not inserted:
            self._hooks.insert(0, hook)

    def register_hook_from_cfg(self, hook_cfg):
        hook_cfg = hook_cfg.copy()
        priority = hook_cfg.pop('priority', 'NORMAL')
        self.register_hook(build_from_cfg(hook_cfg, HOOKS), priority=priority)

    def register_optimizer_hook(self, optimizer_config):
        if isinstance(optimizer_config, dict):
            optimizer_config = dict(optimizer_config)
            optimizer_config.setdefault('type', 'OptimizerHook')
            hook = build_from_cfg(optimizer_config, HOOKS)
        else:
            hook = optimizer_config
        self.register_hook(hook, priority='ABOVE_NORMAL')

    def register_training_hooks(self, lr_config, optimizer_config=None, log_config=None):
        lr_config = dict(lr_config)
        lr_config.pop('policy')
        self.register_hook(StepLrUpdaterHook(**lr_config), priority='VERY_HIGH')
        self.register_optimizer_hook(optimizer_config)
        self.register_hook(TextLoggerHook(), priority='VERY_LOW')

    def call_hook(self, fn_name):
        for hook in self._hooks:
            getattr(hook, fn_name)(self)

    def run_iter(self, data_batch):
        outputs = self.model.train_step(data_batch, self.optimizer)
        self.log_buffer = outputs['log_vars']
        self.outputs = outputs

    def train(self, data_loader):
        self.model.train()
        self.data_loader = data_loader
        self.call_hook('before_train_epoch')
        for i, data_batch in enumerate(data_loader):
            self.call_hook('before_train_iter')
            self.run_iter(data_batch)
            self.call_hook('after_train_iter')
            self._iter += 1
        self.call_hook('after_train_epoch')
        self._epoch += 1

    def run(self, data_loader):
        self._max_iters = self._max_epochs * len(data_loader)
        self.call_hook('before_run')
        while self.epoch < self._max_epochs:
            self.train(data_loader)


# ------------------------------------------------------------ mmdet/models (a tiny single-stage detector)
class TinySingleStageDetector(nn.Module):
    def __init__(self, num_classes, in_channels, feat_channels, strides):
        super().__init__()
        self.stride = strides[0]
        self.backbone = nn.Sequential(
            nn.Conv2d(in_channels, feat_channels, 3, 2, 1), nn.BatchNorm2d(feat_channels), nn.ReLU(),
            nn.Conv2d(feat_channels, feat_channels, 3, 2, 1), nn.BatchNorm2d(feat_channels), nn.ReLU(),
            nn.Conv2d(feat_channels, feat_channels, 3, 2, 1), nn.ReLU())
        self.cls_convs = nn.Conv2d(feat_channels, num_classes, 3, padding=1)
        self.reg_convs = nn.Conv2d(feat_channels, 4, 3, padding=1)
        nn.init.constant_(self.cls_convs.bias, -math.log((1 - 0.01) / 0.01))

    def forward_train(self, img, gt_bboxes, gt_labels):
        feat = self.backbone(img)
        cls_score, bbox_pred = self.cls_convs(feat), F.relu(self.reg_convs(feat))
        B, C, H, W = cls_score.shape
        ys, xs = torch.meshgrid(torch.arange(H), torch.arange(W), indexing='ij')
        points = torch.stack([xs, ys], -1).reshape(-1, 2).float() * self.stride + self.stride // 2
        loss_cls, loss_bbox = 0., 0.
        for b in range(B):
            box, label = gt_bboxes[b][0], gt_labels[b][0]
            inside = (points[:, 0] > box[0]) & (points[:, 0] < box[2]) & (points[:, 1] > box[1]) & (points[:, 1] < box[3])
            target = torch.zeros(H * W, C)
            target[inside, label] = 1.0
            scores = cls_score[b].permute(1, 2, 0).reshape(-1, C)
            loss_cls = loss_cls + torchvision_sigmoid_focal_loss(scores, target) / max(inside.sum().item(), 1)
            ltrb = torch.cat([points - box[:2], box[2:] - points], -1) / self.stride
            preds = bbox_pred[b].permute(1, 2, 0).reshape(-1, 4)
            if inside.any():
                loss_bbox = loss_bbox + F.l1_loss(preds[inside], ltrb[inside])
        return dict(loss_cls=loss_cls / B, loss_bbox=loss_bbox / B)

    def train_step(self, data, optimizer):
        losses = self.forward_train(**data)
        loss = sum(v for v in losses.values())
        log_vars = {k: v.item() for k, v in losses.items()}
        log_vars['loss'] = loss.item()
        return dict(loss=loss, log_vars=log_vars, num_samples=len(data['img']))


def torchvision_sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0):
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * loss).sum()


def build_dataloader(samples_per_gpu, num_imgs, size=64, num_classes=3):
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(num_imgs // samples_per_gpu):
        img = torch.rand(samples_per_gpu, 3, size, size, generator=g)
        xy = torch.randint(0, size // 2, (samples_per_gpu, 2), generator=g).float()
        wh = torch.randint(16, size // 2, (samples_per_gpu, 2), generator=g).float()
        gt_bboxes = [torch.cat([xy[i], xy[i] + wh[i]])[None] for i in range(samples_per_gpu)]
        gt_labels = [torch.randint(0, num_classes, (1,), generator=g) for _ in range(samples_per_gpu)]
        batches.append(dict(img=img, gt_bboxes=gt_bboxes, gt_labels=gt_labels))
    return batches


# ------------------------------------------------------------ mmdet/apis/train.py
def train_detector(model, data_loader, cfg):
    optimizer_cfg = dict(cfg['optimizer'])
    optimizer = getattr(torch.optim, optimizer_cfg.pop('type'))(model.parameters(), **optimizer_cfg)
    runner = EpochBasedRunner(model, optimizer, max_epochs=cfg['runner']['max_epochs'])
    runner.register_training_hooks(cfg['lr_config'], cfg['optimizer_config'])
    for hook_cfg in cfg.get('custom_hooks', []):
        runner.register_hook_from_cfg(hook_cfg)
    runner.run(data_loader)


model = TinySingleStageDetector(**cfg['model'])
train_detector(model, build_dataloader(**cfg['data']), cfg)
