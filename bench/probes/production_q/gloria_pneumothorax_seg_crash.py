# expect: nonscalar_backward
# source: https://github.com/marshuang80/gloria/issues/19
"""Fine-tuning a U-Net for pneumothorax segmentation (SIIM-style), GLoRIA layout.

Builder functions create the mixed focal/dice loss, optimizer and scheduler
from a nested config; a Lightning-style module shares one step between train
and val and aggregates dice in epoch-end hooks. A compact Lightning-like
trainer runs it with the data-parallel ("dp") backend, which splits every
batch across replicas and gathers their step outputs."""
from types import SimpleNamespace as NS

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = NS(
    seed=7,
    model=NS(vision=NS(model_name="unet_small", base_channels=8)),
    data=NS(image_size=32, n_train=48, n_val=16, batch_size=8),
    train=NS(loss_fn=NS(type="MixedLoss", alpha=10.0, gamma=2.0),
             optimizer=NS(name="Adam", weight_decay=1e-6),
             scheduler=NS(name="step", step_size=1, gamma=0.5)),
    lightning=NS(trainer=NS(lr=1e-3, max_epochs=2, gpus=2, distributed_backend="dp")),
)


def dice_loss(pred, target):
    smooth = 1.0
    pred = torch.sigmoid(pred)
    p_flat, t_flat = pred.view(-1), target.view(-1)
    intersection = (p_flat * t_flat).sum()
    return (2.0 * intersection + smooth) / (p_flat.sum() + t_flat.sum() + smooth)


class FocalLoss(nn.Module):
    def __init__(self, gamma=2.0):
        super().__init__()
        self.gamma = gamma

    def forward(self, input, target):
        max_val = (-input).clamp(min=0)
        loss = input - input * target + max_val + ((-max_val).exp() + (-input - max_val).exp()).log()
        invprobs = F.logsigmoid(-input * (target * 2.0 - 1.0))
        return ((invprobs * self.gamma).exp() * loss).mean()


class MixedLoss(nn.Module):
    def __init__(self, alpha=10.0, gamma=2.0):
        super().__init__()
        self.alpha = alpha
        self.focal = FocalLoss(gamma)

    def forward(self, input, target):
        loss = self.alpha * self.focal(input, target) - torch.log(dice_loss(input, target))
        return loss.mean()


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Unet(nn.Module):
    def __init__(self, in_channels=3, classes=1, base=8):
        super().__init__()
        self.enc = nn.ModuleList([conv_block(in_channels, base), conv_block(base, base * 2),
                                  conv_block(base * 2, base * 4)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(base * 4, base * 2, 2, 2), nn.ConvTranspose2d(base * 2, base, 2, 2)])
        self.dec = nn.ModuleList([conv_block(base * 4, base * 2), conv_block(base * 2, base)])
        self.segmentation_head = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.enc):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips[:-1])):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.segmentation_head(x)


def build_loss(cfg):
    return MixedLoss(alpha=cfg.train.loss_fn.alpha, gamma=cfg.train.loss_fn.gamma)


def build_optimizer(cfg, lr, model):
    params = [p for p in model.parameters() if p.requires_grad]
    return getattr(torch.optim, cfg.train.optimizer.name)(params, lr=lr, weight_decay=cfg.train.optimizer.weight_decay)


def build_scheduler(cfg, optimizer, dm=None):
    sch = cfg.train.scheduler
    if sch.name == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=sch.step_size, gamma=sch.gamma)


class LightningModule(nn.Module):
    trainer = logger = None

    def log(self, name, value, **kwargs):
        value = value.detach().mean().item() if torch.is_tensor(value) else float(value)
        self.trainer.logged_metrics.setdefault(name, []).append(value)

    def training_step_end(self, outputs):
        return outputs

    def backward(self, loss, optimizer, optimizer_idx):
        loss.backward()  # raises


def is_overridden(name, model):
    return getattr(type(model), name) is not getattr(LightningModule, name)


class DataParallelAccelerator:
    def __init__(self, num_replicas):
        self.num_replicas = num_replicas

    def scatter(self, batch):
        return list(zip(*[t.chunk(self.num_replicas) for t in batch]))

    def gather(self, outputs):
        first = outputs[0]
        if isinstance(first, dict):
            return {k: self.gather([o[k] for o in outputs]) for k in first}
        if torch.is_tensor(first):
            return torch.stack(outputs) if first.dim() == 0 else torch.cat(outputs)
        return list(outputs)

    def run_step(self, step_fn, batch, batch_idx):
        return self.gather([step_fn(chunk, batch_idx) for chunk in self.scatter(batch)])


class InMemoryLogger:
    def __init__(self):
        self.records, self.experiment = [], self

    def log(self, payload):
        self.records.append({k: (tuple(v.shape), float(v.mean())) for k, v in payload.items()})


class Trainer:
    def __init__(self, max_epochs, gpus, distributed_backend, callbacks=(), logger=None):
        self.max_epochs = max_epochs
        self.accelerator = DataParallelAccelerator(gpus if distributed_backend == "dp" else 1)
        self.callbacks, self.logger = list(callbacks), logger or InMemoryLogger()
        self.logged_metrics, self.current_epoch = {}, 0

    def fit(self, model, dm):
        model.trainer, model.logger, model.dm = self, self.logger, dm
        optimizers = model.configure_optimizers()
        (optimizer,), schedulers = (optimizers if isinstance(optimizers, tuple) else (optimizers, []))
        for self.current_epoch in range(self.max_epochs):
            model.train()
            outputs = []  # step outputs for training_epoch_end
            for batch_idx, batch in enumerate(dm.train_dataloader()):
                out = self.accelerator.run_step(model.training_step, batch, batch_idx)
                if is_overridden("training_step_end", model):
                    out = model.training_step_end(out)
                optimizer.zero_grad()
                model.backward(out["loss"], optimizer, 0)
                optimizer.step()
                outputs.append(out)
            model.training_epoch_end(outputs)
            for s in schedulers:
                s.step()
            self.validate(model, dm)
            for cb in self.callbacks:
                cb.on_validation_end(self, model)

    @torch.no_grad()
    def validate(self, model, dm):
        model.eval()
        model.validation_epoch_end([self.accelerator.run_step(model.validation_step, batch, batch_idx)
                                    for batch_idx, batch in enumerate(dm.val_dataloader())])


class BestDiceCheckpoint:
    def __init__(self):
        self.best, self.state = -1.0, None

    def on_validation_end(self, trainer, model):
        dice = trainer.logged_metrics["val_dice"][-1]
        print(f"epoch {trainer.current_epoch}: val_dice {dice:.4f}")
        if dice > self.best:
            self.best, self.state = dice, {k: v.clone() for k, v in model.state_dict().items()}


class SegmentationModel(LightningModule):
    """Pytorch-Lightning Module"""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.lr = cfg.lightning.trainer.lr
        self.dm = None
        self.model = Unet(base=cfg.model.vision.base_channels)
        self.loss = build_loss(cfg)

    def configure_optimizers(self):
        optimizer = build_optimizer(self.cfg, self.lr, self.model)
        scheduler = build_scheduler(self.cfg, optimizer, self.dm)
        if scheduler is None:
            return [optimizer]
        return [optimizer], [scheduler]

    def training_step(self, batch, batch_idx):
        return self.shared_step(batch, "train", batch_idx)

    def validation_step(self, batch, batch_idx):
        return self.shared_step(batch, "val", batch_idx)

    def training_epoch_end(self, training_step_outputs):
        return self.shared_epoch_end(training_step_outputs, "train")

    def validation_epoch_end(self, validation_step_outputs):
        return self.shared_epoch_end(validation_step_outputs, "val")

    def shared_step(self, batch, split, batch_idx):
        x, y = batch
        logit = self.model(x)
        logit = logit.squeeze()
        loss = self.loss(logit, y)
        prob = torch.sigmoid(logit)
        dice = self.get_dice(prob, y)
        if batch_idx == 0:
            img, mask = batch[0][0], batch[1][0]
            self.logger.experiment.log({"input_image": img, "mask": mask, "layered": 0.6 * mask + 0.4 * img,
                                        "pred": prob[0].detach()})
        self.log(f"{split}_loss", loss, on_epoch=True, on_step=False, logger=True, prog_bar=True)
        return {"loss": loss, "dice": dice, "logit": logit, "prob": prob, "y": y}

    def shared_epoch_end(self, step_outputs, split):
        if self.cfg.lightning.trainer.distributed_backend == "dp":
            loss = torch.stack([x["loss"] for x in step_outputs]).cpu().detach().tolist()
        else:
            loss = [x["loss"].cpu().detach().item() for x in step_outputs]
        dice = [x["dice"] for x in step_outputs]
        self.log(f"{split}_dice", np.array(dice).mean(), on_epoch=True, logger=True, prog_bar=True)
        return np.array(loss).mean()

    def get_dice(self, probability, truth, threshold=0.5):
        batch_size = len(truth)
        with torch.no_grad():
            probability = probability.view(batch_size, -1)
            truth = truth.view(batch_size, -1)
            p = (probability > threshold).float()
            t = (truth > 0.5).float()
            t_sum, p_sum = t.sum(-1), p.sum(-1)
            neg_index, pos_index = torch.nonzero(t_sum == 0), torch.nonzero(t_sum >= 1)
            dice_neg = (p_sum == 0).float()
            dice_pos = 2 * (p * t).sum(-1) / ((p + t).sum(-1))
            dice = torch.cat([dice_pos[pos_index], dice_neg[neg_index]])
        return torch.mean(dice).detach().item()


class PneumothoraxDataModule:
    def __init__(self, cfg):
        g = torch.Generator().manual_seed(cfg.seed)
        self.cfg = cfg
        self.train = self._make(cfg.data.n_train, g)
        self.val = self._make(cfg.data.n_val, g)

    def _make(self, n, g):
        s = self.cfg.data.image_size
        yy, xx = torch.meshgrid(torch.arange(s), torch.arange(s), indexing="ij")
        imgs, masks = 0.3 * torch.rand(n, 3, s, s, generator=g), torch.zeros(n, s, s)
        for i in range(n):
            if i % 3:
                cy, cx = torch.randint(6, s - 6, (2,), generator=g).tolist()
                r = int(torch.randint(3, 8, (1,), generator=g))
                masks[i] = (((yy - cy) ** 2 + (xx - cx) ** 2) < r ** 2).float()
            imgs[i] += 0.5 * masks[i]
        return imgs, masks

    def _loader(self, data, shuffle):
        bs = self.cfg.data.batch_size
        order = torch.randperm(len(data[0])) if shuffle else torch.arange(len(data[0]))
        return [(data[0][order[i:i + bs]], data[1][order[i:i + bs]]) for i in range(0, len(order), bs)]

    train_dataloader = lambda self: self._loader(self.train, True)
    val_dataloader = lambda self: self._loader(self.val, False)


def main():
    torch.manual_seed(cfg.seed)
    dm = PneumothoraxDataModule(cfg)
    model = SegmentationModel(cfg)
    checkpoint, t = BestDiceCheckpoint(), cfg.lightning.trainer
    Trainer(t.max_epochs, t.gpus, t.distributed_backend, callbacks=[checkpoint]).fit(model, dm)
    print("best val dice:", round(checkpoint.best, 4))


if __name__ == "__main__":
    main()
