# expect: clean
# source: https://github.com/Lightning-AI/pytorch-lightning/issues/15925
"""Energy-model training and structure relaxation with a small Lightning-style
framework: a ``LightningModule`` base with hooks and logging, ``Callback``s, and a
``Trainer`` with ``fit`` / ``validate`` / ``predict`` loops.  The user model (``EnergyRegressor``) learns a
pairwise energy for point clouds and, at prediction time, relaxes each input
configuration by a few steps of gradient descent on its predicted energy.
"""
import math
from contextlib import contextmanager
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Callback:
    def on_fit_start(self, trainer, pl_module):
        pass

    def on_train_epoch_end(self, trainer, pl_module):
        pass

    def on_validation_epoch_end(self, trainer, pl_module):
        pass

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch_idx):
        pass


class LightningModule(nn.Module):
    def __init__(self):
        super().__init__()
        self._logged = {}
        self.trainer = None

    def log(self, name, value, prog_bar=False):
        if isinstance(value, torch.Tensor):
            value = value.detach().item()
        self._logged.setdefault(name, []).append(value)

    @property
    def current_epoch(self):
        return self.trainer.current_epoch if self.trainer is not None else 0

    def configure_optimizers(self):
        raise NotImplementedError

    def training_step(self, batch, batch_idx):
        raise NotImplementedError

    def validation_step(self, batch, batch_idx):
        pass

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch[0])


class Trainer:
    def __init__(self, max_epochs=1, callbacks=None, inference_mode=True,
                 gradient_clip_val=None, log_every_n_steps=10):
        self.max_epochs = max_epochs
        self.callbacks = callbacks or []
        self._inference_mode = inference_mode
        self.gradient_clip_val = gradient_clip_val
        self.log_every_n_steps = log_every_n_steps
        self.current_epoch = 0
        self.global_step = 0
        self.lightning_module = None

    def _call_callbacks(self, hook, *args):
        for cb in self.callbacks:
            getattr(cb, hook)(self, self.lightning_module, *args)

    @contextmanager
    def _evaluation_context(self):
        context_manager = torch.inference_mode if self._inference_mode else torch.no_grad
        with context_manager():
            yield

    def _configure(self, model):
        out = model.configure_optimizers()
        if isinstance(out, dict):
            return out["optimizer"], out.get("lr_scheduler")
        return out, None

    def fit(self, model, train_dataloaders, val_dataloaders=None):
        self.lightning_module = model
        model.trainer = self
        optimizer, scheduler = self._configure(model)
        self._call_callbacks("on_fit_start")
        for epoch in range(self.max_epochs):
            self.current_epoch = epoch
            model.train()
            for batch_idx, batch in enumerate(train_dataloaders):
                loss = model.training_step(batch, batch_idx)
                optimizer.zero_grad()
                loss.backward()
                if self.gradient_clip_val:
                    nn.utils.clip_grad_norm_(model.parameters(), self.gradient_clip_val)
                optimizer.step()
                self.global_step += 1
            if scheduler is not None:
                scheduler.step()
            self._call_callbacks("on_train_epoch_end")
            if val_dataloaders is not None:
                self._run_validation(model, val_dataloaders)

    def _run_validation(self, model, dataloader):
        model.eval()
        with self._evaluation_context():
            for batch_idx, batch in enumerate(dataloader):
                model.validation_step(batch, batch_idx)
        self._call_callbacks("on_validation_epoch_end")
        model.train()

    def predict(self, model, dataloaders):
        self.lightning_module = model
        model.trainer = self
        model.eval()
        predictions = []
        with self._evaluation_context():
            for batch_idx, batch in enumerate(dataloaders):
                out = model.predict_step(batch, batch_idx)
                self._call_callbacks("on_predict_batch_end", out, batch_idx)
                predictions.append(out)
        return predictions


class PairEnergy(nn.Module):
    """Sum over atom pairs of an MLP applied to a radial basis of the distance."""

    def __init__(self, n_rbf=16, hidden=32, cutoff=3.0):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0.0, cutoff, n_rbf))
        self.gamma = 10.0 / cutoff
        self.mlp = nn.Sequential(nn.Linear(n_rbf, hidden), nn.SiLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, pos):
        diff = pos.unsqueeze(2) - pos.unsqueeze(1)
        dist = (diff.pow(2).sum(-1) + 1e-6).sqrt()
        rbf = torch.exp(-self.gamma * (dist.unsqueeze(-1) - self.centers) ** 2)
        n = pos.shape[1]
        mask = 1.0 - torch.eye(n, device=pos.device)
        pair = self.mlp(rbf).squeeze(-1) * mask
        return 0.5 * pair.sum(dim=(1, 2))


class EnergyRegressor(LightningModule):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.energy = PairEnergy(hparams.n_rbf, hparams.hidden, hparams.cutoff)

    def forward(self, pos):
        return self.energy(pos)

    def training_step(self, batch, batch_idx):
        pos, target = batch
        loss = F.mse_loss(self(pos), target)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        pos, target = batch
        self.log("val_mae", (self(pos) - target).abs().mean())

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.hparams.epochs)
        return {"optimizer": opt, "lr_scheduler": sched}

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        pos0 = batch[0]
        with torch.enable_grad():
            pos = pos0.clone().requires_grad_(True)
            for _ in range(self.hparams.relax_steps):
                energy = self(pos).sum()
                energy.backward()
                with torch.no_grad():
                    step = pos.grad.clamp(-self.hparams.max_disp, self.hparams.max_disp)
                    pos -= self.hparams.relax_lr * step
                pos.grad = None
                self.zero_grad(set_to_none=True)
        return {"pos": pos.detach(), "energy": self(pos.detach())}


class LossHistory(Callback):
    def __init__(self):
        self.epoch_losses = []

    def on_train_epoch_end(self, trainer, pl_module):
        losses = pl_module._logged.get("train_loss", [])
        if losses:
            self.epoch_losses.append(sum(losses[-8:]) / len(losses[-8:]))

    def on_validation_epoch_end(self, trainer, pl_module):
        maes = pl_module._logged.get("val_mae", [])
        print("epoch %d val_mae %.4f" % (trainer.current_epoch, maes[-1]))


def lennard_jones(pos):
    diff = pos.unsqueeze(2) - pos.unsqueeze(1)
    r = (diff.pow(2).sum(-1) + torch.eye(pos.shape[1])).sqrt()
    inv6 = (1.0 / r) ** 6
    e = 4.0 * (inv6 ** 2 - inv6) * (1.0 - torch.eye(pos.shape[1]))
    return 0.5 * e.sum(dim=(1, 2)).clamp(max=50.0)


def make_data(n, n_atoms, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, n_atoms, 3, generator=g) * 2.5 + 0.3 * torch.arange(
        n_atoms).view(1, n_atoms, 1)
    return pos, lennard_jones(pos) / math.sqrt(n_atoms)


def main():
    torch.manual_seed(0)
    hparams = SimpleNamespace(n_rbf=16, hidden=32, cutoff=3.0, lr=3e-3, epochs=3,
                              relax_steps=4, relax_lr=0.05, max_disp=1.0)
    train = TensorDataset(*make_data(64, 5, seed=1))
    val = TensorDataset(*make_data(16, 5, seed=2))
    model = EnergyRegressor(hparams)
    history = LossHistory()
    trainer = Trainer(max_epochs=hparams.epochs, callbacks=[history], gradient_clip_val=5.0,
                      inference_mode=False)
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True),
                DataLoader(val, batch_size=16))
    preds = trainer.predict(model, DataLoader(TensorDataset(val.tensors[0]), batch_size=8))
    energies = torch.cat([p["energy"] for p in preds])
    print("relaxed", energies.shape[0], "structures, mean energy %.4f" % energies.mean().item())
    print("epoch losses", ["%.4f" % l for l in history.epoch_losses])


if __name__ == "__main__":
    main()
