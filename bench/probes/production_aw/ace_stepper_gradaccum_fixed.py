# expect: clean
# source: https://github.com/ai2cm/ace/issues/544
"""Autoregressive atmosphere emulator (ACE-style stepper) trained on a synthetic reanalysis.

Structure follows the project: dataclass configs (optimization / stepper / trainer),
a StandardNormalizer, an area-weighted MSE loss, an Optimization wrapper with
accumulate_loss / step_weights and a NullOptimization for inference, a
SingleModuleStepper whose predict() rolls the module forward n_forward_steps and
returns time-concatenated BatchData, and a Trainer with train_one_epoch /
validate and a main().
"""
import dataclasses
from typing import Dict, List, Optional

import torch
import torch.nn as nn


# ----------------------------------------------------------------------------- configs
@dataclasses.dataclass
class OptimizationConfig:
    optimizer_type: str = "AdamW"
    lr: float = 1e-3
    kwargs: Dict = dataclasses.field(default_factory=lambda: {"weight_decay": 0.01})
    use_gradient_accumulation: bool = True
    scheduler_gamma: float = 0.9

    def build(self, parameters) -> "Optimization":
        return Optimization(parameters, self)


@dataclasses.dataclass
class StepperConfig:
    in_names: List[str]
    out_names: List[str]
    n_forward_steps: int = 3
    hidden: int = 32
    loss_weights: Optional[Dict[str, float]] = None


@dataclasses.dataclass
class TrainConfig:
    stepper: StepperConfig
    optimization: OptimizationConfig
    n_lat: int = 8
    n_lon: int = 16
    batch_size: int = 4
    n_batches: int = 3
    max_epochs: int = 2
    seed: int = 0


# ----------------------------------------------------------------------------- data
@dataclasses.dataclass
class BatchData:
    data: Dict[str, torch.Tensor]  # each [batch, time, lat, lon]

    @property
    def n_timesteps(self) -> int:
        return next(iter(self.data.values())).shape[1]

    def select_time(self, i: int) -> Dict[str, torch.Tensor]:
        return {k: v[:, i] for k, v in self.data.items()}


def synthetic_reanalysis(cfg: TrainConfig, names: List[str], generator: torch.Generator) -> List[BatchData]:
    batches = []
    n_time = cfg.stepper.n_forward_steps + 1
    lat = torch.linspace(-1.5, 1.5, cfg.n_lat)[:, None]
    for _ in range(cfg.n_batches):
        phase = torch.rand(cfg.batch_size, 1, 1, 1, generator=generator) * 6.28
        t = torch.arange(n_time, dtype=torch.float32)[None, :, None, None]
        lon = torch.linspace(0, 6.28, cfg.n_lon)[None, None, None, :]
        base = torch.cos(lat)[None, None] * torch.sin(lon + 0.3 * t + phase)
        data = {name: base * (i + 1) + 0.05 * torch.randn(base.shape, generator=generator)
                for i, name in enumerate(names)}
        batches.append(BatchData(data))
    return batches


# ----------------------------------------------------------------------------- core
class StandardNormalizer:
    def __init__(self, means: Dict[str, torch.Tensor], stds: Dict[str, torch.Tensor]):
        self.means, self.stds = means, stds

    def normalize(self, tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {k: (t - self.means[k]) / self.stds[k] for k, t in tensors.items()}

    def denormalize(self, tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {k: t * self.stds[k] + self.means[k] for k, t in tensors.items()}


def get_normalizer(batches: List[BatchData], names: List[str]) -> StandardNormalizer:
    cat = {n: torch.cat([b.data[n] for b in batches]) for n in names}
    return StandardNormalizer({n: cat[n].mean() for n in names}, {n: cat[n].std() for n in names})


class AreaWeightedMSELoss:
    def __init__(self, n_lat: int, loss_weights: Optional[Dict[str, float]] = None):
        lats = torch.linspace(-87.5, 87.5, n_lat)
        w = torch.cos(torch.deg2rad(lats))
        self.area_weights = (w / w.mean())[:, None]
        self.loss_weights = loss_weights or {}

    def __call__(self, gen: Dict[str, torch.Tensor], target: Dict[str, torch.Tensor]) -> torch.Tensor:
        total = 0.0
        for name in gen:
            se = (gen[name] - target[name]) ** 2 * self.area_weights
            total = total + self.loss_weights.get(name, 1.0) * se.mean()
        return total / len(gen)


class Optimization:
    def __init__(self, parameters, config: OptimizationConfig):
        self.optimizer = getattr(torch.optim, config.optimizer_type)(parameters, lr=config.lr, **config.kwargs)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=config.scheduler_gamma)
        self.use_gradient_accumulation = config.use_gradient_accumulation
        self._accumulated_loss = torch.tensor(0.0)

    def accumulate_loss(self, loss: torch.Tensor):
        if self.use_gradient_accumulation:
            loss.backward()
            self._accumulated_loss += loss.detach()
        else:
            self._accumulated_loss = self._accumulated_loss + loss

    def step_weights(self):
        if not self.use_gradient_accumulation:
            self._accumulated_loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self._accumulated_loss = torch.tensor(0.0)

    def step_scheduler(self):
        self.scheduler.step()

    @property
    def learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]


class NullOptimization:
    def accumulate_loss(self, loss: torch.Tensor):
        pass

    def step_weights(self):
        pass


class ChannelMLP(nn.Module):
    """Pointwise network standing in for the SFNO core."""
    def __init__(self, n_in: int, n_out: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(n_in, hidden, 3, padding=1, padding_mode="circular"), nn.GELU(),
                                 nn.Conv2d(hidden, n_out, 1))

    def forward(self, x):
        return x[:, : self.net[-1].out_channels] + self.net(x)


@dataclasses.dataclass
class SteppedData:
    loss: torch.Tensor
    gen_data: BatchData
    target_data: BatchData


class SingleModuleStepper:
    def __init__(self, config: StepperConfig, normalizer: StandardNormalizer, n_lat: int):
        self.config = config
        self.normalizer = normalizer
        self.module = ChannelMLP(len(config.in_names), len(config.out_names), config.hidden)
        self.loss_obj = AreaWeightedMSELoss(n_lat, config.loss_weights)

    def _pack(self, tensors: Dict[str, torch.Tensor], names: List[str]) -> torch.Tensor:
        return torch.stack([tensors[n] for n in names], dim=1)

    def _unpack(self, x: torch.Tensor, names: List[str]) -> Dict[str, torch.Tensor]:
        return {n: x[:, i] for i, n in enumerate(names)}

    def predict(self, initial_condition: Dict[str, torch.Tensor], n_forward_steps: int) -> List[Dict[str, torch.Tensor]]:
        state = self.normalizer.normalize(initial_condition)
        outputs: List[Dict[str, torch.Tensor]] = []
        for _ in range(n_forward_steps):
            out = self._unpack(self.module(self._pack(state, self.config.in_names)), self.config.out_names)
            outputs.append(out)
            # autoregressive rollout: the prediction becomes the next input state
            state = {k: v.detach() for k, v in out.items()}
        return outputs

    def run_on_batch(self, data: BatchData, optimization) -> SteppedData:
        n_forward_steps = data.n_timesteps - 1
        gen_steps = self.predict(data.select_time(0), n_forward_steps)
        target_norm = self.normalizer.normalize({n: data.data[n][:, 1:] for n in self.config.out_names})
        total = torch.tensor(0.0)
        for step in range(n_forward_steps):
            step_loss = self.loss_obj(gen_steps[step], {k: v[:, step] for k, v in target_norm.items()})
            optimization.accumulate_loss(step_loss / n_forward_steps)
            total = total + step_loss.detach()
        optimization.step_weights()
        gen_norm = {n: torch.stack([o[n].detach() for o in gen_steps], dim=1) for n in self.config.out_names}
        gen_data = BatchData(self.normalizer.denormalize(gen_norm))
        return SteppedData(loss=total / n_forward_steps, gen_data=gen_data, target_data=data)


# ----------------------------------------------------------------------------- trainer
class Trainer:
    def __init__(self, config: TrainConfig):
        torch.manual_seed(config.seed)
        self.config = config
        g = torch.Generator().manual_seed(config.seed)
        names = config.stepper.in_names
        self.train_data = synthetic_reanalysis(config, names, g)
        self.valid_data = synthetic_reanalysis(config, names, g)[:1]
        normalizer = get_normalizer(self.train_data, names)
        self.stepper = SingleModuleStepper(config.stepper, normalizer, config.n_lat)
        self.optimization = config.optimization.build(self.stepper.module.parameters())
        self.callbacks = [lambda epoch, logs: print("epoch %d  %s" % (epoch, "  ".join(
            "%s=%.4f" % kv for kv in logs.items())))]

    def train_one_epoch(self) -> float:
        self.stepper.module.train()
        losses = [self.stepper.run_on_batch(batch, self.optimization).loss.item() for batch in self.train_data]
        return sum(losses) / len(losses)

    def validate(self) -> float:
        self.stepper.module.eval()
        with torch.no_grad():
            losses = [self.stepper.run_on_batch(b, NullOptimization()).loss.item() for b in self.valid_data]
        return sum(losses) / len(losses)

    def train(self):
        for epoch in range(self.config.max_epochs):
            train_loss = self.train_one_epoch()
            valid_loss = self.validate()
            self.optimization.step_scheduler()
            for cb in self.callbacks:
                cb(epoch, {"train/loss": train_loss, "val/loss": valid_loss, "lr": self.optimization.learning_rate})


def main():
    names = ["PRESsfc", "TMP2m", "Q2m"]
    config = TrainConfig(
        stepper=StepperConfig(in_names=names, out_names=names, n_forward_steps=3, loss_weights={"PRESsfc": 2.0}),
        optimization=OptimizationConfig(use_gradient_accumulation=True),
    )
    Trainer(config).train()


if __name__ == "__main__":
    main()
