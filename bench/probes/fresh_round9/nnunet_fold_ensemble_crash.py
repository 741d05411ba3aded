# expect: inference_tensor
# source: https://github.com/MIC-DKFZ/nnUNet/issues/2364
"""nnU-Net v2 style predictor for a 3d_fullres configuration: sliding-window
inference with gaussian importance weighting and mirroring test-time
augmentation, ensembling of the per-fold checkpoints, and conversion of the
logits to a segmentation. Runs on CPU with a tiny synthetic network."""
import itertools
from dataclasses import dataclass, field
from functools import lru_cache
from queue import Queue
from threading import Thread
from typing import List, Tuple, Union

import numpy as np
import torch
from torch import nn


@dataclass
class ConfigurationManager:
    patch_size: List[int] = field(default_factory=lambda: [16, 16, 16])
    spacing: List[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    features_per_stage: List[int] = field(default_factory=lambda: [4, 8])


class LabelManager:
    def __init__(self, label_dict: dict):
        self.label_dict = label_dict

    @property
    def num_segmentation_heads(self) -> int:
        return len(self.label_dict)

    def apply_inference_nonlin(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float(), 0)

    def convert_probabilities_to_segmentation(self, probs: torch.Tensor) -> torch.Tensor:
        return probs.argmax(0)


class PlainConvUNet(nn.Module):
    def __init__(self, in_ch: int, features: List[int], num_classes: int):
        super().__init__()
        self.enc0 = nn.Sequential(nn.Conv3d(in_ch, features[0], 3, padding=1), nn.InstanceNorm3d(features[0]),
                                  nn.LeakyReLU(0.01))
        self.enc1 = nn.Sequential(nn.Conv3d(features[0], features[1], 3, stride=2, padding=1),
                                  nn.InstanceNorm3d(features[1]), nn.LeakyReLU(0.01))
        self.up = nn.ConvTranspose3d(features[1], features[0], 2, stride=2)
        self.dec = nn.Sequential(nn.Conv3d(2 * features[0], features[0], 3, padding=1), nn.LeakyReLU(0.01))
        self.seg = nn.Conv3d(features[0], num_classes, 1)

    def forward(self, x):
        s0 = self.enc0(x)
        x = self.up(self.enc1(s0))
        return self.seg(self.dec(torch.cat((x, s0), 1)))


def empty_cache(device: torch.device):
    if device.type == 'cuda':
        torch.cuda.empty_cache()


@lru_cache(maxsize=2)
def compute_gaussian(tile_size: Tuple[int, ...], sigma_scale: float = 1. / 8, value_scaling_factor: float = 1,
                     dtype=torch.float16, device=torch.device('cpu')) -> torch.Tensor:
    grids = np.meshgrid(*[np.arange(t) for t in tile_size], indexing='ij')
    center = [t // 2 for t in tile_size]
    sigmas = [t * sigma_scale for t in tile_size]
    g = np.exp(-sum((gr - c) ** 2 / (2 * s ** 2) for gr, c, s in zip(grids, center, sigmas)))
    gaussian_importance_map = torch.from_numpy(g)
    gaussian_importance_map /= (torch.max(gaussian_importance_map) / value_scaling_factor)
    gaussian_importance_map = gaussian_importance_map.to(device=device, dtype=dtype)
    mask = gaussian_importance_map == 0
    gaussian_importance_map[mask] = torch.min(gaussian_importance_map[~mask])
    return gaussian_importance_map


def compute_steps_for_sliding_window(image_size, tile_size, tile_step_size: float) -> List[List[int]]:
    target_step_sizes_in_voxels = [i * tile_step_size for i in tile_size]
    num_steps = [int(np.ceil((i - k) / j)) + 1 for i, j, k in zip(image_size, target_step_sizes_in_voxels, tile_size)]
    steps = []
    for dim in range(len(tile_size)):
        max_step_value = image_size[dim] - tile_size[dim]
        actual_step_size = max_step_value / (num_steps[dim] - 1) if num_steps[dim] > 1 else 99999999999
        steps.append([int(np.round(actual_step_size * i)) for i in range(num_steps[dim])])
    return steps


class nnUNetPredictor:
    def __init__(self, tile_step_size: float = 0.5, use_gaussian: bool = True, use_mirroring: bool = True,
                 perform_everything_on_device: bool = True, device: torch.device = torch.device('cpu'),
                 verbose: bool = False):
        self.tile_step_size = tile_step_size
        self.use_gaussian = use_gaussian
        self.use_mirroring = use_mirroring
        self.perform_everything_on_device = perform_everything_on_device
        self.device = device
        self.verbose = verbose
        self.network = self.list_of_parameters = self.configuration_manager = self.label_manager = None
        self.allowed_mirroring_axes = None

    def manual_initialization(self, network: nn.Module, configuration_manager: ConfigurationManager,
                              parameters: List[dict], label_manager: LabelManager,
                              inference_allowed_mirroring_axes: Tuple[int, ...]):
        self.network = network
        self.configuration_manager = configuration_manager
        self.list_of_parameters = parameters
        self.label_manager = label_manager
        self.allowed_mirroring_axes = inference_allowed_mirroring_axes

    def predict_logits_from_preprocessed_data(self, data: torch.Tensor) -> torch.Tensor:
        n_threads = torch.get_num_threads()
        torch.set_num_threads(min(2, n_threads))
        prediction = None

        for params in self.list_of_parameters:
            self.network.load_state_dict(params)

            # why not leave prediction on device if perform_everything_on_device? Because this may cause the
            # second iteration to crash due to OOM.
            if prediction is None:
                prediction = self.predict_sliding_window_return_logits(data).to('cpu')
            else:
                prediction += self.predict_sliding_window_return_logits(data).to('cpu')  # raises

        if len(self.list_of_parameters) > 1:
            prediction /= len(self.list_of_parameters)

        if self.verbose: print('Prediction done')
        torch.set_num_threads(n_threads)
        return prediction

    def _internal_get_sliding_window_slicers(self, image_size: Tuple[int, ...]):
        slicers = []
        steps = compute_steps_for_sliding_window(image_size, self.configuration_manager.patch_size,
                                                 self.tile_step_size)
        for sx in steps[0]:
            for sy in steps[1]:
                for sz in steps[2]:
                    slicers.append(tuple([slice(None), *[slice(si, si + ti) for si, ti in
                                                         zip((sx, sy, sz), self.configuration_manager.patch_size)]]))
        return slicers

    @torch.inference_mode()
    def _internal_maybe_mirror_and_predict(self, x: torch.Tensor) -> torch.Tensor:
        mirror_axes = self.allowed_mirroring_axes if self.use_mirroring else None
        prediction = self.network(x)
        if mirror_axes is not None:
            assert max(mirror_axes) <= x.ndim - 3, 'mirror_axes does not match the dimension of the input!'
            mirror_axes = [m + 2 for m in mirror_axes]
            axes_combinations = [c for i in range(len(mirror_axes)) for c in itertools.combinations(mirror_axes, i + 1)]
            for axes in axes_combinations:
                prediction += torch.flip(self.network(torch.flip(x, axes)), axes)
            prediction /= (len(axes_combinations) + 1)
        return prediction

    @torch.inference_mode()
    def _internal_predict_sliding_window_return_logits(self, data: torch.Tensor, slicers, do_on_device: bool = True):
        results_device = self.device if do_on_device else torch.device('cpu')

        def producer(d, slh, q):
            for s in slh:
                q.put((torch.clone(d[s][None], memory_format=torch.contiguous_format).to(self.device), s))
            q.put('end')

        data = data.to(results_device)
        queue = Queue(maxsize=2)
        t = Thread(target=producer, args=(data, slicers, queue))
        t.start()

        predicted_logits = torch.zeros((self.label_manager.num_segmentation_heads, *data.shape[1:]),
                                       dtype=torch.half, device=results_device)
        n_predictions = torch.zeros(data.shape[1:], dtype=torch.half, device=results_device)
        if self.use_gaussian:
            gaussian = compute_gaussian(tuple(self.configuration_manager.patch_size), sigma_scale=1. / 8,
                                        value_scaling_factor=10, device=results_device)
        else:
            gaussian = 1

        while True:
            item = queue.get()
            if item == 'end':
                queue.task_done()
                break
            workon, sl = item
            prediction = self._internal_maybe_mirror_and_predict(workon)[0].to(results_device)
            if self.use_gaussian:
                prediction *= gaussian
            predicted_logits[sl] += prediction
            n_predictions[sl[1:]] += gaussian
            queue.task_done()
        queue.join()
        t.join()

        torch.div(predicted_logits, n_predictions, out=predicted_logits)
        if torch.any(torch.isinf(predicted_logits)):
            raise RuntimeError('Encountered inf in predicted array. Aborting...')
        return predicted_logits

    @torch.inference_mode()
    def predict_sliding_window_return_logits(self, input_image: torch.Tensor) -> Union[np.ndarray, torch.Tensor]:
        assert isinstance(input_image, torch.Tensor)
        self.network = self.network.to(self.device)
        self.network.eval()
        empty_cache(self.device)
        assert input_image.ndim == 4, 'input_image must be a 4D np.ndarray or torch.Tensor (c, x, y, z)'
        slicers = self._internal_get_sliding_window_slicers(input_image.shape[1:])
        predicted_logits = self._internal_predict_sliding_window_return_logits(input_image, slicers,
                                                                               self.perform_everything_on_device)
        empty_cache(self.device)
        return predicted_logits

    def predict_single_npy_array(self, input_image: np.ndarray, save_or_return_probabilities: bool = False):
        data = torch.from_numpy(input_image).float()
        predicted_logits = self.predict_logits_from_preprocessed_data(data).cpu()
        probabilities = self.label_manager.apply_inference_nonlin(predicted_logits)
        segmentation = self.label_manager.convert_probabilities_to_segmentation(probabilities)
        if save_or_return_probabilities:
            return segmentation.numpy(), probabilities.numpy()
        return segmentation.numpy()


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    configuration_manager = ConfigurationManager()
    label_manager = LabelManager({'background': 0, 'liver': 1, 'tumor': 2})
    network = PlainConvUNet(1, configuration_manager.features_per_stage, label_manager.num_segmentation_heads)
    folds = (0, 1)
    parameters = []
    for f in folds:
        torch.manual_seed(f)
        parameters.append({k: v.clone() for k, v in PlainConvUNet(
            1, configuration_manager.features_per_stage, label_manager.num_segmentation_heads).state_dict().items()})

    predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=True,
                                perform_everything_on_device=True, device=torch.device('cpu'), verbose=False)
    predictor.manual_initialization(network, configuration_manager, parameters, label_manager,
                                    inference_allowed_mirroring_axes=(0, 1, 2))

    image = np.random.randn(1, 24, 20, 20).astype(np.float32)
    seg, probs = predictor.predict_single_npy_array(image, save_or_return_probabilities=True)
    print('segmentation', seg.shape, 'labels present', np.unique(seg).tolist(), 'max prob', float(probs.max()))


if __name__ == '__main__':
    main()
