# expect: no_grad_fn
# source: https://github.com/Lightning-AI/pytorch-lightning/issues/15765
"""Physics-informed network for the viscous Burgers equation, trained with a
small Lightning-style Trainer (fit loop, evaluation loop, logging, schedulers).

u_t + u u_x - nu u_xx = 0 on x in [-1, 1], t in [0, 1],
u(x, 0) = -sin(pi x), u(-1, t) = u(1, t) = 0.
"""
import math
from collections import defaultdict

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LightningModuleLite(nn.Module):
    """The subset of the LightningModule API the trainer below relies on."""

    def __init__(self):
        super().__init__()
        self._logged = defaultdict(list)
        self.current_epoch = 0

    def log(self, name, value, prog_bar=False):
        self._logged[name].append(float(value.detach()) if torch.is_tensor(value) else value)

    def training_step(self, batch, batch_idx):
        raise NotImplementedError

    def validation_step(self, batch, batch_idx):
        return None

    def configure_optimizers(self):
        raise NotImplementedError

    def on_validation_model_eval(self):
        self.eval()

    def on_validation_model_train(self):
        self.train()


class Trainer:
    def __init__(self, max_epochs=1, check_val_every_n_epoch=1, inference_mode=True,
                 gradient_clip_val=None, log_every_n_steps=10):
        self.max_epochs = max_epochs
        self.check_val_every_n_epoch = check_val_every_n_epoch
        self.inference_mode = inference_mode
        self.gradient_clip_val = gradient_clip_val
        self.log_every_n_steps = log_every_n_steps
        self.global_step = 0

    def _evaluation_context(self):
        return torch.inference_mode() if self.inference_mode else torch.no_grad()

    def _configure(self, model):
        conf = model.configure_optimizers()
        if isinstance(conf, dict):
            return conf["optimizer"], conf.get("lr_scheduler")
        return conf, None

    def _run_validation(self, model, val_dataloader):
        model.on_validation_model_eval()
        outputs = []
        with self._evaluation_context():
            for batch_idx, batch in enumerate(val_dataloader):
                outputs.append(model.validation_step(batch, batch_idx))
        model.on_validation_model_train()
        return outputs

    def fit(self, model, train_dataloaders, val_dataloaders=None):
        optimizer, scheduler = self._configure(model)
        for epoch in range(self.max_epochs):
            model.current_epoch = epoch
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
            if val_dataloaders is not None and (epoch + 1) % self.check_val_every_n_epoch == 0:
                self._run_validation(model, val_dataloaders)
            logged = {k: v[-1] for k, v in model._logged.items()}
            print("epoch {} {}".format(epoch, {k: round(v, 5) for k, v in logged.items()}))


class BurgersPINN(LightningModuleLite):
    def __init__(self, hidden=32, depth=3, nu=0.01 / math.pi, lr=1e-3, w_pde=1.0, w_data=1.0):
        super().__init__()
        layers, width = [], 2
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)
        self.nu, self.lr = nu, lr
        self.w_pde, self.w_data = w_pde, w_data

    def forward(self, x, t):
        return self.net(torch.cat([x, t], dim=1))

    def pde_residual(self, x, t):
        u = self.forward(x, t)
        ones = torch.ones_like(u)
        u_x, u_t = torch.autograd.grad(u, (x, t), grad_outputs=ones, create_graph=True)  # raises
        u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x), create_graph=True)[0]
        return u_t + u * u_x - self.nu * u_xx

    @staticmethod
    def boundary_points(n, generator):
        t = torch.rand(n, 1, generator=generator)
        x = torch.where(torch.rand(n, 1, generator=generator) < 0.5, -1.0, 1.0)
        x0 = torch.rand(n, 1, generator=generator) * 2 - 1
        return (x, t, torch.zeros(n, 1)), (x0, torch.zeros(n, 1), -torch.sin(math.pi * x0))

    def training_step(self, batch, batch_idx):
        x, t = batch
        x = x.clone().requires_grad_(True)
        t = t.clone().requires_grad_(True)
        loss_pde = self.pde_residual(x, t).pow(2).mean()
        g = torch.Generator().manual_seed(1000 * self.current_epoch + batch_idx)
        (xb, tb, ub), (x0, t0, u0) = self.boundary_points(x.shape[0] // 2, g)
        loss_data = (self(xb, tb) - ub).pow(2).mean() + (self(x0, t0) - u0).pow(2).mean()
        loss = self.w_pde * loss_pde + self.w_data * loss_data
        self.log("train_pde", loss_pde)
        self.log("train_data", loss_data)
        return loss

    def validation_step(self, batch, batch_idx):
        x, t = batch
        # the residual needs input gradients even while validating
        with torch.set_grad_enabled(True):
            x = x.clone().requires_grad_(True)
            t = t.clone().requires_grad_(True)
            physics_loss = self.pde_residual(x, t).pow(2).mean()
        self.log("val_pde", physics_loss, prog_bar=True)
        return {"loss": physics_loss.detach()}

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


def collocation_loader(n, batch_size, seed, shuffle):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    t = torch.rand(n, 1, generator=g)
    return DataLoader(TensorDataset(x, t), batch_size=batch_size, shuffle=shuffle,
                      generator=torch.Generator().manual_seed(seed))


def main():
    torch.manual_seed(0)
    model = BurgersPINN()
    train_loader = collocation_loader(512, 128, seed=0, shuffle=True)
    val_loader = collocation_loader(256, 128, seed=1, shuffle=False)
    trainer = Trainer(max_epochs=3, check_val_every_n_epoch=1, gradient_clip_val=1.0)
    trainer.fit(model, train_loader, val_loader)


if __name__ == "__main__":
    main()
