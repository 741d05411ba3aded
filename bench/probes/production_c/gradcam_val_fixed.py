# expect: clean
# source: https://github.com/jacobgil/pytorch-grad-cam/issues/381
"""Log Grad-CAM heatmaps at the end of every validation epoch.

A minimal Lightning-like loop (fit -> train epoch -> validation epoch with
hooks) plus a Grad-CAM implementation that captures activations with a
forward hook and gradients with a tensor hook on the target layer.
"""
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ActivationsAndGradients:
    """Class for extracting activations and registering gradients from targetted intermediate layers"""

    def __init__(self, model, target_layers):
        self.model = model
        self.gradients = []
        self.activations = []
        self.handles = []
        for target_layer in target_layers:
            self.handles.append(target_layer.register_forward_hook(self.save_activation))
            # Because of https://github.com/pytorch/pytorch/issues/61519,
            # we don't use backward hook to record gradients.
            self.handles.append(target_layer.register_forward_hook(self.save_gradient))

    def save_activation(self, module, input, output):
        self.activations.append(output.cpu().detach())

    def save_gradient(self, module, input, output):
        if not hasattr(output, "requires_grad") or not output.requires_grad:
            # You can only register hooks on tensor requires grad.
            return

        def _store_grad(grad):
            self.gradients = [grad.cpu().detach()] + self.gradients

        output.register_hook(_store_grad)

    def __call__(self, x):
        self.gradients = []
        self.activations = []
        return self.model(x)

    def release(self):
        for handle in self.handles:
            handle.remove()


class GradCAM:
    def __init__(self, model, target_layers):
        self.model = model.eval()
        self.target_layers = target_layers
        self.activations_and_grads = ActivationsAndGradients(self.model, target_layers)

    @staticmethod
    def get_cam_weights(grads):
        return np.mean(grads, axis=(2, 3))

    def forward(self, input_tensor, targets=None):
        input_tensor = input_tensor.clone().requires_grad_(True)
        outputs = self.activations_and_grads(input_tensor)
        if targets is None:
            targets = outputs.argmax(dim=-1)
        self.model.zero_grad()
        loss = outputs.gather(1, targets[:, None]).sum()
        loss.backward(retain_graph=True)
        return self.compute_cam_per_layer(input_tensor.shape[-2:])

    def compute_cam_per_layer(self, size):
        cams = []
        for act, grad in zip(self.activations_and_grads.activations, self.activations_and_grads.gradients):
            weights = self.get_cam_weights(grad.numpy())
            cam = np.maximum((weights[:, :, None, None] * act.numpy()).sum(axis=1), 0)
            cam = F.interpolate(torch.from_numpy(cam)[:, None], size=tuple(size), mode="bilinear")[:, 0]
            cams.append(cam / (cam.amax(dim=(1, 2), keepdim=True) + 1e-7))
        return torch.stack(cams).mean(0)

    __call__ = forward


class SmallConvNet(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        )
        self.head = nn.Linear(16, num_classes)

    def forward(self, x):
        f = self.features(x)
        return self.head(F.adaptive_avg_pool2d(f, 1).flatten(1))


class CamLoggingModule(nn.Module):
    """The 'LightningModule': holds the net and knows how to train/validate/explain."""

    def __init__(self, hparams):
        super().__init__()
        self.hp = hparams
        self.net = SmallConvNet(hparams.num_classes)
        self.logged = defaultdict(list)
        self._val_batch = None

    @property
    def target_layers(self):
        return [self.net.features[-1]]

    def training_step(self, batch):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.logged["train_loss"].append(loss.item())
        return loss

    def validation_step(self, batch):
        x, y = batch
        acc = (self.net(x).argmax(1) == y).float().mean()
        self.logged["val_acc"].append(acc.item())
        self._val_batch = x

    def on_validation_epoch_end(self):
        cam = GradCAM(model=self.net, target_layers=self.target_layers)
        with torch.set_grad_enabled(True):  # required for grad cam
            heatmaps = cam(input_tensor=self._val_batch[: self.hp.cam_samples])
        cam.activations_and_grads.release()
        self.logged["cam_mean"].append(float(heatmaps.mean()))

    def configure_optimizers(self):
        return torch.optim.SGD(self.net.parameters(), lr=self.hp.lr, momentum=0.9)


class MiniTrainer:
    def __init__(self, max_epochs, limit_batches):
        self.max_epochs = max_epochs
        self.limit_batches = limit_batches

    @staticmethod
    def _batches(n, bs, num_classes, seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(n):
            yield torch.randn(bs, 3, 16, 16, generator=g), torch.randint(0, num_classes, (bs,), generator=g)

    def _run_validation(self, module):
        module.eval()
        with torch.no_grad():
            for batch in self._batches(self.limit_batches, 8, module.hp.num_classes, 100):
                module.validation_step(batch)
            module.on_validation_epoch_end()
        module.train()

    def fit(self, module):
        optimizer = module.configure_optimizers()
        for epoch in range(self.max_epochs):
            module.train()
            for batch in self._batches(self.limit_batches, 8, module.hp.num_classes, epoch):
                optimizer.zero_grad()
                module.training_step(batch).backward()
                optimizer.step()
            self._run_validation(module)
            print(f"epoch {epoch}: loss={module.logged['train_loss'][-1]:.3f} "
                  f"val_acc={module.logged['val_acc'][-1]:.3f} cam={module.logged['cam_mean'][-1]:.3f}")


def main():
    torch.manual_seed(0)
    hparams = SimpleNamespace(num_classes=5, lr=0.05, cam_samples=4)
    MiniTrainer(max_epochs=2, limit_batches=3).fit(CamLoggingModule(hparams))


if __name__ == "__main__":
    main()
