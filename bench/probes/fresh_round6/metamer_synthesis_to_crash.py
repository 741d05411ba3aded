# expect: nonleaf_optimizer
# source: https://github.com/plenoptic-org/plenoptic/issues/283
"""Metamer synthesis (plenoptic-style Synthesis / OptimizedSynthesis / Metamer)."""
import abc
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class Synthesis(abc.ABC):
    r"""Abstract super-class for synthesis objects."""

    def __init__(self):
        self._loaded = False

    @abc.abstractmethod
    def synthesize(self):
        r"""Synthesize something."""
        pass

    @abc.abstractmethod
    def to(self, *args, attrs: list = [], **kwargs):
        r"""Moves and/or casts the parameters and buffers.

        Its signature is similar to :meth:`torch.Tensor.to`. Items in ``attrs``
        that start with "saved_" are only cast, never moved to another device.
        """
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)

        def move(a, k):
            move_device = None if k.startswith("saved_") else device
            return a.to(move_device, dtype, non_blocking)

        for k in attrs:
            if hasattr(self, k):
                attr = getattr(self, k)
                if isinstance(attr, torch.Tensor):
                    attr = move(attr, k)
                    if isinstance(getattr(self, k), torch.nn.Parameter):
                        attr = torch.nn.Parameter(attr)
                    if getattr(self, k).requires_grad:
                        attr = attr.requires_grad_()
                    setattr(self, k, attr)
                elif isinstance(attr, list):
                    setattr(self, k, [move(a, k) for a in attr])


class OptimizedSynthesis(Synthesis):
    r"""Abstract super-class for synthesis objects that use optimization."""

    def __init__(self, range_penalty_lambda: float = 0.1, allowed_range: tuple = (0, 1)):
        super().__init__()
        self._losses = []
        self._gradient_norm = []
        self._pixel_change_norm = []
        self._store_progress = None
        self._optimizer = None
        if range_penalty_lambda < 0:
            raise Exception("range_penalty_lambda must be non-negative!")
        self._range_penalty_lambda = range_penalty_lambda
        self._allowed_range = allowed_range

    @abc.abstractmethod
    def objective_function(self):
        pass

    def _closure(self) -> torch.Tensor:
        self.optimizer.zero_grad()
        loss = self.objective_function()
        loss.backward(retain_graph=False)
        return loss

    def _initialize_optimizer(self, optimizer, synth_attr: torch.Tensor, learning_rate: float = 0.01):
        """Initialize optimizer: Adam(amsgrad) on the synthesis attribute unless one is given."""
        if self._optimizer is not None:
            if optimizer is not None:
                raise TypeError("When resuming synthesis, optimizer arg must be None!")
            return
        if optimizer is None:
            self._optimizer = torch.optim.Adam([synth_attr], lr=learning_rate, amsgrad=True)  # raises
        else:
            if len(optimizer.param_groups[0]["params"]) != 1:
                raise ValueError("For metamer synthesis, optimizer must have one parameter!")
            self._optimizer = optimizer

    @property
    def range_penalty_lambda(self):
        return self._range_penalty_lambda

    @property
    def allowed_range(self):
        return self._allowed_range

    @property
    def losses(self):
        return torch.as_tensor(self._losses)

    @property
    def optimizer(self):
        return self._optimizer


def penalize_range(synth_img: torch.Tensor, allowed_range=(0.0, 1.0)) -> torch.Tensor:
    below_min = synth_img - allowed_range[0]
    below_min = torch.clamp(below_min, max=0)
    above_max = synth_img - allowed_range[1]
    above_max = torch.clamp(above_max, min=0)
    return torch.sum(below_min ** 2 + above_max ** 2)


def mse(synth_rep: torch.Tensor, ref_rep: torch.Tensor) -> torch.Tensor:
    return torch.pow(synth_rep - ref_rep, 2).mean()


class Metamer(OptimizedSynthesis):
    r"""Synthesize metamers for image-computable differentiable models."""

    def __init__(self, image: torch.Tensor, model: nn.Module, loss_function=mse,
                 range_penalty_lambda: float = 0.1, allowed_range: tuple = (0, 1),
                 initial_image: torch.Tensor = None):
        super().__init__(range_penalty_lambda, allowed_range)
        self.model = model
        self._image = image
        self._image_shape = image.shape
        self._target_representation = self.model(self.image)
        self.loss_function = loss_function
        self._saved_metamer = []
        self._initialize(initial_image)

    def _initialize(self, initial_image=None):
        if initial_image is None:
            metamer = torch.rand_like(self.image)
        else:
            metamer = initial_image.clone()
        self._metamer = metamer.requires_grad_()

    def objective_function(self, metamer_representation=None, target_representation=None):
        if metamer_representation is None:
            metamer_representation = self.model(self.metamer)
        if target_representation is None:
            target_representation = self.target_representation
        loss = self.loss_function(metamer_representation, target_representation)
        range_penalty = penalize_range(self.metamer, self.allowed_range)
        return loss + self.range_penalty_lambda * range_penalty

    def synthesize(self, max_iter: int = 100, optimizer=None, store_progress: bool = False,
                   stop_criterion: float = 1e-4):
        self._initialize_optimizer(optimizer, self.metamer, 0.01)
        for _ in range(max_iter):
            last_iter_metamer = self.metamer.clone()
            loss = self.optimizer.step(self._closure)
            self._losses.append(loss.item())
            self._gradient_norm.append(self.metamer.grad.norm().item())
            self._pixel_change_norm.append((self.metamer - last_iter_metamer).norm().item())
            if store_progress:
                self._saved_metamer.append(self.metamer.clone().detach())
            if len(self._losses) > 3 and abs(self._losses[-3] - self._losses[-1]) < stop_criterion:
                break

    def to(self, *args, **kwargs):
        attrs = ["_image", "_target_representation", "_metamer", "_saved_metamer"]
        super().to(*args, attrs=attrs, **kwargs)
        try:
            self.model.to(*args, **kwargs)
        except AttributeError:
            warnings.warn("model has no `to` method, so we leave it as is...")

    @property
    def image(self):
        return self._image

    @property
    def target_representation(self):
        return self._target_representation

    @property
    def metamer(self):
        return self._metamer


class CenterSurround(nn.Module):
    """Difference-of-Gaussians front end with fixed filters."""

    def __init__(self, kernel_size=7):
        super().__init__()
        ax = torch.arange(kernel_size) - kernel_size // 2
        r2 = (ax[:, None] ** 2 + ax[None, :] ** 2).float()
        center = torch.exp(-r2 / 2.0)
        surround = torch.exp(-r2 / 8.0)
        dog = center / center.sum() - surround / surround.sum()
        self.register_buffer("filt", dog[None, None])

    def forward(self, x):
        return F.conv2d(x, self.filt, padding=self.filt.shape[-1] // 2)


if __name__ == "__main__":
    torch.manual_seed(0)
    img = torch.rand(1, 1, 24, 24)
    model = CenterSurround().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    met = Metamer(img, model)
    met.to(torch.float64)
    met.synthesize(max_iter=20)
    print("final loss", met.losses[-1].item(), met.metamer.dtype)
