# expect: clean
# source: https://github.com/aramis-lab/clinicadl/pull/653
"""Brain-age regression with a ClinicaDL-style config -> factory -> trainer stack."""
import inspect
from copy import deepcopy
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn

torch.manual_seed(0)


# ----------------------------------------------------------------------------- utils/factories.py
class DefaultFromLibrary(str, Enum):
    YES = "DefaultFromLibrary"


def get_args_and_defaults(func) -> Tuple[List[str], Dict[str, Any]]:
    """Gets the arguments of a function, as well as the default values possibly attached to them."""
    signature = inspect.signature(func)
    args = list(signature.parameters.keys())
    defaults = {k: v.default for k, v in signature.parameters.items() if v.default is not inspect.Parameter.empty}
    return args, defaults


# ----------------------------------------------------------------------------- losses/config.py
class ImplementedLoss(str, Enum):
    """Implemented losses in ClinicaDL."""
    CROSS_ENTROPY = "CrossEntropyLoss"
    L1 = "L1Loss"
    MSE = "MSELoss"
    HUBER = "HuberLoss"
    SMOOTH_L1 = "SmoothL1Loss"


class Reduction(str, Enum):
    """Supported reduction method in ClinicaDL."""
    MEAN = "mean"
    SUM = "sum"


@dataclass
class LossConfig:
    """Config class to configure the loss function."""
    loss: Union[ImplementedLoss, str] = ImplementedLoss.MSE
    reduction: Union[Reduction, str] = DefaultFromLibrary.YES
    delta: Union[float, str] = DefaultFromLibrary.YES
    beta: Union[float, str] = DefaultFromLibrary.YES
    weight: Union[Optional[List[float]], str] = DefaultFromLibrary.YES

    def __post_init__(self):
        self.loss = ImplementedLoss(self.loss).value
        if self.reduction != DefaultFromLibrary.YES:
            self.reduction = Reduction(self.reduction).value
        for name in ("delta", "beta"):
            v = getattr(self, name)
            if v != DefaultFromLibrary.YES and not v > 0:
                raise ValueError(f"{name} must be positive, got {v}.")

    def model_dump(self) -> Dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- losses/factory.py
def get_loss_function(config: LossConfig) -> Tuple[nn.Module, LossConfig]:
    """Factory function to get a loss function from PyTorch.

    The arguments set to default are replaced by their effective values (the default
    values from the library), so that the returned config can be saved for reproducibility.
    """
    loss_class = getattr(torch.nn, config.loss)
    expected_args, config_dict = get_args_and_defaults(loss_class.__init__)
    for arg, value in config.model_dump().items():
        if arg in expected_args and value != DefaultFromLibrary.YES:
            config_dict[arg] = value

    config_dict_ = deepcopy(config_dict)
    if "weight" in config_dict and config_dict["weight"] is not None:
        config_dict_["weight"] = torch.Tensor(config_dict_["weight"])
    loss = loss_class(**config_dict_)
    known = LossConfig.__dataclass_fields__  # extra library arguments are ignored, as in pydantic
    updated_config = LossConfig(loss=config.loss, **{k: v for k, v in config_dict.items() if k in known})
    return loss, updated_config


# ----------------------------------------------------------------------------- optim
@dataclass
class OptimizerConfig:
    optimizer: str = "Adam"
    lr: float = 1e-3
    weight_decay: float = 1e-4


def get_optimizer(model: nn.Module, config: OptimizerConfig) -> torch.optim.Optimizer:
    optim_class = getattr(torch.optim, config.optimizer)
    return optim_class(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


# ----------------------------------------------------------------------------- network
class Conv5FC3(nn.Module):
    """Small 3D CNN used for image-level regression."""
    def __init__(self, in_channels=1, out_features=1):
        super().__init__()
        self.convolutions = nn.Sequential(
            nn.Conv3d(in_channels, 4, 3, padding=1), nn.BatchNorm3d(4), nn.ReLU(), nn.MaxPool3d(2),
            nn.Conv3d(4, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.MaxPool3d(2))
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(8 * 2 * 2 * 2, 16), nn.ReLU(), nn.Linear(16, out_features))

    def forward(self, x):
        return self.fc(self.convolutions(x))


# ----------------------------------------------------------------------------- trainer
@dataclass
class TrainerConfig:
    loss: LossConfig = field(default_factory=LossConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    epochs: int = 2
    batch_size: int = 4


class Trainer:
    def __init__(self, config: TrainerConfig, model: nn.Module):
        self.config = config
        self.model = model
        self.criterion, self.config.loss = get_loss_function(config.loss)
        self.optimizer = get_optimizer(model, config.optimizer)
        self.history: List[float] = []

    def compute_outputs_and_loss(self, input_dict: Dict[str, torch.Tensor]):
        images, labels = input_dict["image"], input_dict["label"]
        outputs = self.model(images).squeeze(-1)
        loss = self.criterion(outputs, labels)
        return outputs, {"loss": loss}

    def _train_epoch(self, loader):
        self.model.train()
        for i, data in enumerate(loader):
            _, loss_dict = self.compute_outputs_and_loss(data)
            self.optimizer.zero_grad()
            loss_dict["loss"].backward()
            self.optimizer.step()
            self.history.append(float(loss_dict["loss"].detach().mean()))

    def train(self, loader):
        for epoch in range(self.config.epochs):
            self._train_epoch(loader)
            print(f"epoch {epoch}: mean loss {sum(self.history[-len(loader):]) / len(loader):.4f}")


def make_caps_loader(n_subjects=12, batch_size=4):
    """Synthetic T1w volumes (8^3) and ages."""
    images = torch.randn(n_subjects, 1, 8, 8, 8)
    ages = 60 + 10 * images.mean(dim=(1, 2, 3, 4)) + torch.randn(n_subjects)
    return [{"image": images[i:i + batch_size], "label": (ages[i:i + batch_size] - 60) / 10}
            for i in range(0, n_subjects, batch_size)]


config = TrainerConfig(loss=LossConfig(loss="SmoothL1Loss", reduction="mean", beta=2.0),
                       optimizer=OptimizerConfig(lr=5e-3))
trainer = Trainer(config, Conv5FC3())
print("effective loss config:", trainer.config.loss)
trainer.train(make_caps_loader())
