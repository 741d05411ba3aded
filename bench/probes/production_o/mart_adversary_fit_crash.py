# expect: inference_tensor
# source: https://github.com/IntelLabs/MART/commit/1d1b7274868757738f73178d264f70b95313a86b
"""Adversarial robustness evaluation in the style of IntelLabs/MART.

The adversary lives inside the model sequence.  When the outer trainer runs
``validate`` (under ``torch.inference_mode()``, as recent Lightning does) the
adversary fits a perturbation with its own inner "attacker" trainer on the
same batch, then the perturbed input goes through the rest of the model.
Lightning is replaced by a small Trainer with the same call structure.
"""
from functools import partial
from itertools import cycle, islice

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


# ------------------------------------------------------------ mini Lightning
class Trainer:
    def __init__(self, max_epochs=1, limit_train_batches=None, inference_mode=True):
        self.max_epochs = max_epochs
        self.limit_train_batches = limit_train_batches
        self.inference_mode = inference_mode

    def fit(self, module, train_dataloaders):
        optimizer = module.configure_optimizers()
        module.train()
        for epoch in range(self.max_epochs):
            for batch_idx, batch in enumerate(islice(train_dataloaders, self.limit_train_batches)):
                loss = module.training_step(batch, batch_idx)
                optimizer.zero_grad()
                loss.backward()
                module.configure_gradient_clipping(optimizer)
                optimizer.step()
                module.on_train_batch_end()

    def validate(self, module, dataloaders):
        ctx = torch.inference_mode if self.inference_mode else torch.no_grad
        module.eval()
        outputs = []
        with ctx():
            for batch_idx, batch in enumerate(dataloaders):
                batch = {k: v.to("cpu") for k, v in batch.items()}  # transfer_batch_to_device
                outputs.append(module.validation_step(batch, batch_idx))
        return module.on_validation_epoch_end(outputs)


# ------------------------------------------------------------ mart/attack
class Perturber(nn.Module):
    def __init__(self, initializer):
        super().__init__()
        self.initializer = initializer
        self.perturbation = None

    def configure_perturbation(self, input):
        self.perturbation = nn.Parameter(torch.empty_like(input), requires_grad=True)
        self.initializer(self.perturbation)

    def parameters(self, recurse=True):
        return [self.perturbation]

    def forward(self, **batch):
        return self.perturbation


class Additive:
    def __call__(self, perturbation, *, input, target=None, **kwargs):
        return input + perturbation


class LinfEnforcer:
    def __init__(self, eps):
        self.eps = eps

    def __call__(self, input_adv, *, input, **kwargs):
        with torch.no_grad():
            delta = (input_adv - input).clamp(-self.eps, self.eps)
            assert torch.all(delta.abs() <= self.eps + 1e-6)


def sign_gradient(parameters):
    for p in parameters:
        p.grad.sign_()


class Adversary(nn.Module):
    """An adversary module which generates and applies perturbation to input."""

    def __init__(self, *, perturber, composer, optimizer, gain, gradient_modifier=None,
                 attacker=None, max_iters=5, eps=8 / 255):
        super().__init__()
        self._perturber = [perturber]
        self.composer = composer
        self.optimizer = optimizer
        self.gain_fn = gain
        self.gradient_modifier = gradient_modifier
        self.enforcer = LinfEnforcer(eps)
        self.eps = eps
        self._attacker = attacker or partial(Trainer, max_epochs=0, limit_train_batches=max_iters)

    @property
    def perturber(self):
        return self._perturber[0]

    def configure_optimizers(self):
        return self.optimizer(self.perturber.parameters())

    def training_step(self, batch, batch_idx):
        batch = batch.copy()
        model = batch.pop("model")
        sequence = batch.pop("sequence")
        input_adv = self.composer(self.perturber(**batch), **batch)
        logits = model(input_adv)
        gain = self.gain_fn(logits, batch["target"])  # raises
        return -gain

    def configure_gradient_clipping(self, optimizer):
        if self.gradient_modifier:
            for group in optimizer.param_groups:
                self.gradient_modifier(group["params"])

    def on_train_batch_end(self):
        with torch.no_grad():
            p = self.perturber.perturbation
            p.clamp_(-self.eps, self.eps)

    def forward(self, *, model=None, sequence=None, **batch):
        batch["model"] = model
        batch["sequence"] = sequence
        if model and sequence:
            self._attack(**batch)
        perturbation = self.perturber(**batch)
        input_adv = self.composer(perturbation, **batch)
        if model and sequence:
            self.enforcer(input_adv, **batch)
        return input_adv

    # Make sure we can do autograd.
    # Earlier Pytorch Lightning uses no_grad(), but later PL uses inference_mode():
    #   https://github.com/Lightning-AI/lightning/pull/12715
    @torch.enable_grad()
    @torch.inference_mode(False)
    def _attack(self, *, input, target, **batch):
        batch["input"] = input
        batch["target"] = target

        # Configure and reset perturbation for current inputs
        self.perturber.configure_perturbation(input)

        # Attack, aka fit a perturbation, for one epoch by cycling over the same input batch.
        self.attacker.max_epochs += 1
        self.attacker.fit(self, train_dataloaders=cycle([batch]))

    @property
    def attacker(self):
        if isinstance(self._attacker, partial):
            self._attacker = self._attacker()
        return self._attacker


# ------------------------------------------------------------ mart/models
class Normalize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x):
        return (x - self.mean) / self.std


class CifarNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


class LitModular(nn.Module):
    """Model sequence: adversary -> preprocessor -> classifier."""

    def __init__(self, adversary, preprocessor, classifier):
        super().__init__()
        self.adversary = adversary
        self.preprocessor = preprocessor
        self.classifier = classifier

    def model(self, x):
        return self.classifier(self.preprocessor(x))

    def validation_step(self, batch, batch_idx):
        input_adv = self.adversary(input=batch["input"], target=batch["target"],
                                   model=self.model, sequence=("preprocessor", "classifier"))
        logits = self.model(input_adv)
        clean_logits = self.model(batch["input"])
        return dict(adv_correct=(logits.argmax(1) == batch["target"]).sum().item(),
                    clean_correct=(clean_logits.argmax(1) == batch["target"]).sum().item(),
                    n=batch["target"].numel())

    def on_validation_epoch_end(self, outputs):
        n = sum(o["n"] for o in outputs)
        metrics = {"clean_acc": sum(o["clean_correct"] for o in outputs) / n,
                   "adv_acc": sum(o["adv_correct"] for o in outputs) / n}
        print(metrics)
        return metrics


class CifarLikeDataset(torch.utils.data.Dataset):
    def __init__(self, n=16):
        g = torch.Generator().manual_seed(1)
        self.images = torch.rand(n, 3, 16, 16, generator=g)
        self.targets = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, idx):
        return dict(input=self.images[idx], target=self.targets[idx])


def cifar_like_loader(batch_size=8):
    return torch.utils.data.DataLoader(CifarLikeDataset(), batch_size=batch_size, shuffle=False)


adversary = Adversary(
    perturber=Perturber(initializer=partial(nn.init.uniform_, a=-8 / 255, b=8 / 255)),
    composer=Additive(),
    optimizer=partial(torch.optim.SGD, lr=2 / 255, momentum=0),
    gain=nn.CrossEntropyLoss(),
    gradient_modifier=sign_gradient,
    max_iters=5, eps=8 / 255)
model = LitModular(adversary, Normalize([0.49, 0.48, 0.45], [0.25, 0.24, 0.26]), CifarNet())
for p in model.classifier.parameters():
    p.requires_grad_(False)
trainer = Trainer(inference_mode=True)
trainer.validate(model, dataloaders=cifar_like_loader())
