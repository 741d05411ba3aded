# expect: clean
# source: https://github.com/Lightning-AI/pytorch-lightning/issues/4073
"""Miniature Lightning-style trainer with a DataParallel strategy: the batch is
scattered over replicas, each replica runs `training_step`, the per-replica
outputs are gathered and handed to `training_step_end`, and the trainer runs
backward/step with callbacks for logging and LR monitoring."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


class TrainerConfig:
    max_epochs = 2
    num_replicas = 2
    batch_size = 16
    lr = 0.05
    log_every_n_steps = 2


class Callback:
    def on_train_batch_end(self, trainer, module, outputs, batch_idx):
        pass

    def on_train_epoch_end(self, trainer, module):
        pass


class LoggingCallback(Callback):
    def __init__(self):
        self.history = []

    def on_train_batch_end(self, trainer, module, outputs, batch_idx):
        if trainer.global_step % trainer.cfg.log_every_n_steps == 0:
            self.history.append((trainer.global_step, float(outputs["loss"].detach().mean())))

    def on_train_epoch_end(self, trainer, module):
        last = self.history[-1] if self.history else None
        print(f"epoch {trainer.current_epoch} last logged {last}")


class LearningRateMonitor(Callback):
    def on_train_epoch_end(self, trainer, module):
        lrs = [g["lr"] for g in trainer.optimizer.param_groups]
        print(f"lr {lrs}")


class DataParallelStrategy:
    """Scatter the batch, run the step on every replica, gather the results."""

    def __init__(self, num_replicas):
        self.num_replicas = num_replicas

    def scatter(self, batch):
        x, y = batch
        return list(zip(x.chunk(self.num_replicas), y.chunk(self.num_replicas)))

    def gather(self, outputs):
        gathered = {}
        for key in outputs[0]:
            vals = [o[key] for o in outputs]
            if vals[0].dim() == 0:
                gathered[key] = torch.stack(vals)
            else:
                gathered[key] = torch.cat(vals)
        return gathered

    def training_step(self, module, batch, batch_idx):
        outputs = [module.training_step(b, batch_idx) for b in self.scatter(batch)]
        return self.gather(outputs)

    def reduce(self, output):
        return {k: v.mean() for k, v in output.items()}


class LightningModule(nn.Module):
    def training_step_end(self, outputs):
        return outputs


class LitClassifier(LightningModule):
    def __init__(self, in_dim=20, hidden=32, n_classes=2, lr=0.05):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        prediction = self(x)
        loss = F.cross_entropy(prediction, y)
        acc = (prediction.argmax(1) == y).float().mean()
        return {"loss": loss, "acc": acc}

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return opt, sched


class Trainer:
    def __init__(self, cfg, callbacks=None):
        self.cfg = cfg
        self.callbacks = callbacks or []
        self.strategy = DataParallelStrategy(cfg.num_replicas)
        self.global_step = 0
        self.current_epoch = 0
        self.optimizer = None

    def _call_hook(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def fit(self, module, train_loader):
        self.optimizer, scheduler = module.configure_optimizers()
        module.train()
        for epoch in range(self.cfg.max_epochs):
            self.current_epoch = epoch
            for batch_idx, batch in enumerate(train_loader):
                step_output = self.strategy.training_step(module, batch, batch_idx)
                step_output = module.training_step_end(step_output)
                step_output = self.strategy.reduce(step_output)
                closure_loss = step_output["loss"]
                self.optimizer.zero_grad()
                closure_loss.backward()
                self.optimizer.step()
                self.global_step += 1
                self._call_hook("on_train_batch_end", module, step_output, batch_idx)
            scheduler.step()
            self._call_hook("on_train_epoch_end", module)
        return module


def make_loader(cfg, n=128, in_dim=20):
    x = torch.randn(n, in_dim)
    w = torch.randn(in_dim)
    y = (x @ w > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=cfg.batch_size, shuffle=True,
                      generator=torch.Generator().manual_seed(0))


def main():
    cfg = TrainerConfig()
    model = LitClassifier(lr=cfg.lr)
    trainer = Trainer(cfg, callbacks=[LoggingCallback(), LearningRateMonitor()])
    trainer.fit(model, make_loader(cfg))
    print("done, steps:", trainer.global_step, "ppl-ish:",
          math.exp(min(10.0, trainer.callbacks[0].history[-1][1])))


if __name__ == "__main__":
    main()
