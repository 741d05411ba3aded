# expect: inference_tensor
# source: https://github.com/MIC-DKFZ/nnUNet/issues/2193
"""Sliding-window 2D segmentation predictor that ensembles the checkpoints of several folds."""
import itertools
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ConfigurationManager:
    patch_size: tuple = (32, 32)
    num_input_channels: int = 1
    num_segmentation_heads: int = 3
    base_features: int = 8


@dataclass
class PredictorConfig:
    tile_step_size: float = 0.5
    use_gaussian: bool = True
    use_mirroring: bool = True
    allowed_mirroring_axes: tuple = (0, 1)
    perform_everything_on_device: bool = True
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    folds: tuple = (0, 1, 2)
    verbose: bool = False


class PlainConvUNet(nn.Module):
    def __init__(self, in_ch, n_classes, f=8):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(in_ch, f, 3, padding=1), nn.InstanceNorm2d(f), nn.LeakyReLU(0.01))
        self.enc2 = nn.Sequential(nn.Conv2d(f, 2 * f, 3, stride=2, padding=1), nn.InstanceNorm2d(2 * f), nn.LeakyReLU(0.01))
        self.up = nn.ConvTranspose2d(2 * f, f, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv2d(2 * f, f, 3, padding=1), nn.InstanceNorm2d(f), nn.LeakyReLU(0.01))
        self.seg = nn.Conv2d(f, n_classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        return self.seg(self.dec(torch.cat([self.up(e2), e1], 1)))


@lru_cache(maxsize=2)
def compute_gaussian(tile_size, sigma_scale=1.0 / 8, value_scaling_factor=1.0, dtype=torch.float32, device="cpu"):
    center = [i // 2 for i in tile_size]
    sigmas = [i * sigma_scale for i in tile_size]
    grids = np.meshgrid(*[np.arange(s) for s in tile_size], indexing="ij")
    g = np.exp(-sum(((gr - c) ** 2) / (2 * s ** 2) for gr, c, s in zip(grids, center, sigmas)))
    g = torch.from_numpy(g).to(dtype=dtype, device=device)
    g = g / g.max() * value_scaling_factor
    g[g == 0] = g[g != 0].min()
    return g


def compute_steps_for_sliding_window(image_size, tile_size, tile_step_size):
    target_step = [i * tile_step_size for i in tile_size]
    num_steps = [int(np.ceil((i - k) / j)) + 1 for i, j, k in zip(image_size, target_step, tile_size)]
    steps = []
    for dim in range(len(tile_size)):
        max_step_value = image_size[dim] - tile_size[dim]
        actual = max_step_value / (num_steps[dim] - 1) if num_steps[dim] > 1 else 99999999999
        steps.append([int(np.round(actual * i)) for i in range(num_steps[dim])])
    return steps


def pad_nd_image(image, new_shape):
    pads = []
    for s, n in zip(reversed(image.shape[1:]), reversed(new_shape)):
        diff = max(n - s, 0)
        pads += [diff // 2, diff - diff // 2]
    padded = F.pad(image, pads)
    revert = tuple(slice(p0, p0 + s) for p0, s in zip(reversed(pads[0::2]), image.shape[1:]))
    return padded, (slice(None),) + revert


class SegmentationPredictor:
    def __init__(self, cfg: PredictorConfig, configuration_manager: ConfigurationManager):
        self.cfg = cfg
        self.configuration_manager = configuration_manager
        self.device = cfg.device
        self.network = None
        self.list_of_parameters = []

    def initialize_from_trained_folds(self, fold_checkpoints):
        cm = self.configuration_manager
        self.network = PlainConvUNet(cm.num_input_channels, cm.num_segmentation_heads, cm.base_features)
        self.list_of_parameters = [fold_checkpoints[f] for f in self.cfg.folds]

    def _internal_get_sliding_window_slicers(self, image_size):
        patch = self.configuration_manager.patch_size
        steps = compute_steps_for_sliding_window(image_size, patch, self.cfg.tile_step_size)
        return [(slice(None), slice(sx, sx + patch[0]), slice(sy, sy + patch[1])) for sx in steps[0] for sy in steps[1]]

    @torch.inference_mode()
    def _internal_maybe_mirror_and_predict(self, x):
        mirror_axes = self.cfg.allowed_mirroring_axes if self.cfg.use_mirroring else None
        prediction = self.network(x)
        if mirror_axes is not None:
            mirror_axes = [m + 2 for m in mirror_axes]
            combos = [c for i in range(len(mirror_axes)) for c in itertools.combinations(mirror_axes, i + 1)]
            for axes in combos:
                prediction += torch.flip(self.network(torch.flip(x, axes)), axes)
            prediction /= len(combos) + 1
        return prediction

    @torch.inference_mode()
    def _internal_predict_sliding_window_return_logits(self, data, slicers, do_on_device=True):
        results_device = self.device if do_on_device else torch.device("cpu")
        data = data.to(results_device)
        heads = self.configuration_manager.num_segmentation_heads
        predicted_logits = torch.zeros((heads, *data.shape[1:]), device=results_device)
        n_predictions = torch.zeros(data.shape[1:], device=results_device)
        gaussian = compute_gaussian(tuple(self.configuration_manager.patch_size), value_scaling_factor=10,
                                    device=str(results_device)) if self.cfg.use_gaussian else 1
        for sl in slicers:
            workon = data[sl][None].to(self.device)
            prediction = self._internal_maybe_mirror_and_predict(workon)[0].to(results_device)
            if self.cfg.use_gaussian:
                prediction *= gaussian
            predicted_logits[sl] += prediction
            n_predictions[sl[1:]] += gaussian
        predicted_logits /= n_predictions
        return predicted_logits

    @torch.inference_mode()
    def predict_sliding_window_return_logits(self, input_image):
        assert input_image.ndim == 3, "input_image must be a 3D tensor (c, x, y)"
        self.network = self.network.to(self.device).eval()
        data, slicer_revert_padding = pad_nd_image(input_image, self.configuration_manager.patch_size)
        slicers = self._internal_get_sliding_window_slicers(data.shape[1:])
        predicted_logits = self._internal_predict_sliding_window_return_logits(
            data, slicers, self.cfg.perform_everything_on_device)
        return predicted_logits[slicer_revert_padding]

    def predict_logits_from_preprocessed_data(self, data):
        prediction = None
        for params in self.list_of_parameters:
            self.network.load_state_dict(params)
            if prediction is None:
                prediction = self.predict_sliding_window_return_logits(data).to("cpu")
            else:
                prediction += self.predict_sliding_window_return_logits(data).to("cpu")  # raises
        if len(self.list_of_parameters) > 1:
            prediction /= len(self.list_of_parameters)
        if self.cfg.verbose:
            print("Prediction done")
        return prediction

    def predict_from_list_of_arrays(self, images):
        results = []
        for img in images:
            data = torch.from_numpy((img - img.mean()) / (img.std() + 1e-8)).float()
            logits = self.predict_logits_from_preprocessed_data(data)
            results.append(logits.argmax(0).numpy())
        return results


def make_case(rng, size=(48, 40)):
    img = rng.normal(0, 0.3, size=(1, *size)).astype(np.float32)
    seg = np.zeros(size, dtype=np.int64)
    seg[8:20, 6:18] = 1
    seg[26:40, 20:34] = 2
    img[0][seg == 1] += 1.5
    img[0][seg == 2] -= 1.5
    return img, seg


def dice(pred, gt, label):
    a, b = pred == label, gt == label
    return 2 * (a & b).sum() / max(a.sum() + b.sum(), 1)


def train_fold_checkpoints(cm, cases, n_folds=3, steps=15):
    checkpoints = []
    for fold in range(n_folds):
        torch.manual_seed(fold)
        net = PlainConvUNet(cm.num_input_channels, cm.num_segmentation_heads, cm.base_features)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        train = [c for i, c in enumerate(cases) if i % n_folds != fold]
        for _ in range(steps):
            for img, seg in train:
                x = torch.from_numpy((img - img.mean()) / img.std())[None]
                loss = F.cross_entropy(net(x), torch.from_numpy(seg)[None])
                opt.zero_grad()
                loss.backward()
                opt.step()
        checkpoints.append({k: v.detach().clone() for k, v in net.state_dict().items()})
    return checkpoints


def main():
    rng = np.random.default_rng(0)
    cm = ConfigurationManager()
    cfg = PredictorConfig()
    train_cases = [make_case(rng) for _ in range(3)]
    checkpoints = train_fold_checkpoints(cm, train_cases)
    predictor = SegmentationPredictor(cfg, cm)
    predictor.initialize_from_trained_folds(checkpoints)
    test_cases = [make_case(rng) for _ in range(2)]
    preds = predictor.predict_from_list_of_arrays([img for img, _ in test_cases])
    for i, (pred, (_, seg)) in enumerate(zip(preds, test_cases)):
        print("case {}: dice1={:.3f} dice2={:.3f}".format(i, dice(pred, seg, 1), dice(pred, seg, 2)))


if __name__ == "__main__":
    main()
