# expect: clean
# source: https://github.com/deepchecks/deepchecks/issues/1332
"""Model error analysis for an object-detection model, deepchecks-vision style.

Trains nothing: it runs the user's detector over a train and a test split, scores
every sample (mean IoU of its detections), extracts image properties and checks
which properties explain the per-sample error.
"""
import enum
import typing as t
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)


# ----------------------------------------------------------------------------- iou_utils
def jaccard_iou(dt: np.array, gt: np.array):
    """Calculate the jaccard IoU of a detection [x, y, w, h, conf, cls] and a label [cls, x, y, w, h]."""
    x_dt, y_dt, w_dt, h_dt = dt[:4]
    x_gt, y_gt, w_gt, h_gt = gt[1:]
    x2_dt, y2_dt = x_dt + w_dt, y_dt + h_dt
    x2_gt, y2_gt = x_gt + w_gt, y_gt + h_gt
    xi, yi = max(x_dt, x_gt), max(y_dt, y_gt)
    x2i, y2i = min(x2_dt, x2_gt), min(y2_dt, y2_gt)
    intersection = max(x2i - xi, 0) * max(y2i - yi, 0)
    return intersection / (w_dt * h_dt + w_gt * h_gt - intersection)


def compute_pairwise_ious(detected, ground_truth, iou_func):
    """Compute pairwise ious between detections and ground truth."""
    ious = np.zeros((len(detected), len(ground_truth)))
    for g_idx, g in enumerate(ground_truth):
        for d_idx, d in enumerate(detected):
            ious[d_idx, g_idx] = iou_func(d, g)
    return ious


def untorchify(item):
    """If item is torch tensor do `.item()` else return item itself."""
    if isinstance(item, torch.Tensor):
        return item.cpu().item()
    return item


def group_class_detection_label(detected, ground_truth):
    """Group bounding detection and labels by class."""
    class_bounding_boxes = defaultdict(lambda: {"detected": [], "ground_truth": []})
    for single_detection in detected:
        class_id = untorchify(single_detection[5])
        class_bounding_boxes[class_id]["detected"].append(single_detection.cpu().detach().numpy())
    for single_ground_truth in ground_truth:
        class_id = untorchify(single_ground_truth[0])
        class_bounding_boxes[class_id]["ground_truth"].append(single_ground_truth.cpu().detach().numpy())
    return class_bounding_boxes


def compute_bounding_box_class_ious(detected, ground_truth):
    """Compute ious between bounding boxes of the same class."""
    bb_info = group_class_detection_label(detected, ground_truth)
    return {class_id: compute_pairwise_ious(info["detected"], info["ground_truth"], jaccard_iou)
            for class_id, info in bb_info.items()}


def per_sample_mean_iou(predictions, labels):
    """Calculate mean iou for a single sample."""
    mean_ious = []
    for detected, ground_truth in zip(predictions, labels):
        if len(ground_truth) == 0:
            mean_ious.append(1 if len(detected) == 0 else 0)
            continue
        elif len(detected) == 0:
            mean_ious.append(0)
            continue
        ious = compute_bounding_box_class_ious(detected, ground_truth)
        count, sum_iou = 0, 0
        for _, cls_ious in ious.items():
            for detection in cls_ious:
                sum_iou += max(detection, default=0)
                count += 1
        mean_ious.append(sum_iou / count if count else 0)
    return mean_ious


# ----------------------------------------------------------------------------- vision data
class DatasetKind(enum.Enum):
    TRAIN = "Train"
    TEST = "Test"


class TaskType(enum.Enum):
    CLASSIFICATION = "classification"
    OBJECT_DETECTION = "object_detection"


class DetectionData:
    """User-implemented formatter: how to get labels, images and predictions out of a batch."""
    task_type = TaskType.OBJECT_DETECTION

    def __init__(self, loader):
        self.data_loader = loader

    def batch_to_images(self, batch):
        return [(img.permute(1, 2, 0).numpy() * 255).astype(np.uint8) for img in batch[0]]

    def batch_to_labels(self, batch):
        return batch[1]

    def infer_on_batch(self, batch, model, device):
        raw = model(batch[0].to(device))                       # (B, K, 6): x, y, w, h, conf, cls
        return [r[r[:, 4] > 0.3] for r in raw]


class Batch:
    """Represents dataset batch returned by the dataloader during iteration."""

    def __init__(self, batch, context, dataset_kind):
        self._context, self._dataset_kind, self._batch = context, dataset_kind, batch
        self._labels = self._predictions = self._images = None

    @property
    def labels(self):
        if self._labels is None:
            self._labels = self._context.get_data_by_kind(self._dataset_kind).batch_to_labels(self._batch)
        return self._labels

    @property
    def predictions(self):
        if self._predictions is None:
            dataset = self._context.get_data_by_kind(self._dataset_kind)
            self._predictions = dataset.infer_on_batch(self._batch, self._context.model, self._context.device)
        return self._predictions

    @property
    def images(self):
        if self._images is None:
            self._images = self._context.get_data_by_kind(self._dataset_kind).batch_to_images(self._batch)
        return self._images


class Context:
    def __init__(self, train, test, model, device="cpu"):
        self.train, self.test, self.model, self.device = train, test, model, torch.device(device)

    def get_data_by_kind(self, kind):
        return self.train if kind == DatasetKind.TRAIN else self.test


# ----------------------------------------------------------------------------- check
def _brightness(images):
    return [float(img.mean()) for img in images]


def _rms_contrast(images):
    return [float(img.std()) for img in images]


default_image_properties = [
    {"name": "Brightness", "method": _brightness, "output_type": "continuous"},
    {"name": "RMS Contrast", "method": _rms_contrast, "output_type": "continuous"},
]


class ModelErrorAnalysis:
    """Find the properties that best split the data into segments of high and low model error."""

    def __init__(self, image_properties=None, min_error_model_score=0.5):
        self.image_properties = image_properties or default_image_properties
        self.min_error_model_score = min_error_model_score

    def initialize_run(self, context):
        self._properties = {k: defaultdict(list) for k in DatasetKind}
        self._scores = {k: [] for k in DatasetKind}

    def update(self, context, batch: Batch, dataset_kind):
        """Accumulate property data of images and scores."""
        predictions, labels = batch.predictions, batch.labels
        for prop in self.image_properties:
            self._properties[dataset_kind][prop["name"]].extend(prop["method"](batch.images))
        if isinstance(predictions, torch.Tensor):
            predictions = predictions.cpu().detach().numpy()
        if isinstance(labels, torch.Tensor):
            labels = labels.cpu().detach().numpy()
        self._scores[dataset_kind].extend(per_sample_mean_iou(predictions, labels))

    def compute(self, context) -> t.Dict[str, float]:
        """Fit a per-property linear error model on train, report its r^2 on test."""
        y_tr, y_te = np.array(self._scores[DatasetKind.TRAIN]), np.array(self._scores[DatasetKind.TEST])
        result = {}
        for name in self._properties[DatasetKind.TRAIN]:
            x_tr = np.array(self._properties[DatasetKind.TRAIN][name])
            x_te = np.array(self._properties[DatasetKind.TEST][name])
            coef = np.polyfit(x_tr, y_tr, 1)
            resid = y_te - np.polyval(coef, x_te)
            result[name] = 1 - resid.var() / (y_te.var() + 1e-12)
        return {k: v for k, v in result.items() if v >= self.min_error_model_score} or result

    def run(self, train, test, model, device="cpu"):
        context = Context(train, test, model, device)
        self.initialize_run(context)
        for kind, data in ((DatasetKind.TRAIN, train), (DatasetKind.TEST, test)):
            for raw in data.data_loader:
                self.update(context, Batch(raw, context, kind), kind)
        return self.compute(context)


# ----------------------------------------------------------------------------- user code
class TinyDetector(nn.Module):
    def __init__(self, k=6, n_classes=3):
        super().__init__()
        self.k, self.n_classes = k, n_classes
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(32, k * (5 + n_classes))

    def forward(self, x):
        out = self.head(self.features(x)).view(len(x), self.k, 5 + self.n_classes)
        boxes = out[..., :4].sigmoid() * 32
        conf = out[..., 4:5].sigmoid()
        cls = out[..., 5:].argmax(-1, keepdim=True).float()
        return torch.cat([boxes, conf, cls], -1)


def make_loader(n_batches, seed):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        imgs = torch.rand(4, 3, 32, 32, generator=g)
        labels = [torch.cat([torch.randint(0, 3, (2, 1), generator=g).float(),
                             torch.rand(2, 4, generator=g) * 16], 1) for _ in range(4)]
        batches.append((imgs, labels))
    return batches


model = TinyDetector().eval()
train_ds, test_ds = DetectionData(make_loader(3, 1)), DetectionData(make_loader(2, 2))
print(ModelErrorAnalysis(min_error_model_score=0.2).run(train_ds, test_ds, model))
