# expect: inference_tensor
# source: https://github.com/mantasu/glasses-detector/issues/19
"""Eyeglasses bounding-box detector: a TinyBinaryDetector (CONV-RELU-BN-POOL
blocks + linear box head), a short fine-tuning run on synthetic face crops,
then GlassesDetector.predict on raw images of a different size, with boxes
rescaled to the original image size and formatted as integer coordinates.
"""
import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(5)
np.random.seed(5)


# ------------------------------------------------------------------ utils.py
class eval_infer_mode:
    """Context manager and decorator for evaluation and inference: sets the
    model to eval mode and enables :class:`torch.inference_mode` for the
    duration of a function or a ``with`` statement, then restores both."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.was_training = model.training

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return wrapper

    def __enter__(self):
        self.model.eval()
        self._inference_mode = torch.inference_mode(True)
        self._inference_mode.__enter__()

    def __exit__(self, type: Any, value: Any, traceback: Any):
        self._inference_mode.__exit__(type, value, traceback)
        self.model.train(self.was_training)


# ------------------------------------------------------------------ architectures
class TinyBinaryDetector(nn.Module):
    """Tiny binary detector: several CONV-RELU-BN-MAXPOOL blocks, no paddings."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            self._create_block(3, 6, 5),
            self._create_block(6, 12, 3),
            self._create_block(12, 24, 3),
            self._create_block(24, 48, 3),
            nn.AdaptiveAvgPool2d((1, 1)),
            nn.Flatten(),
        )
        self.fc = nn.Linear(48, 4)

    def _create_block(self, num_in, num_out, filter_size):
        return nn.Sequential(nn.Conv2d(num_in, num_out, filter_size, 1, "valid", bias=False),
                             nn.ReLU(), nn.BatchNorm2d(num_out), nn.MaxPool2d(2, 2))

    def forward(self, imgs, targets=None):
        preds = self.fc(self.features(torch.stack(imgs)))
        h, w = imgs[0].shape[-2:]

        # Convert to (x_min, y_min, x_max, y_max)
        preds[:, 0] = preds[:, 0] * w
        preds[:, 1] = preds[:, 1] * h
        preds[:, 2] = preds[:, 0] + preds[:, 2] * w
        preds[:, 3] = preds[:, 1] + preds[:, 3] * h

        if targets is None:
            preds[:, 0] = torch.clamp(preds[:, 0], 0, w)
            preds[:, 1] = torch.clamp(preds[:, 1], 0, h)
            preds[:, 2] = torch.clamp(preds[:, 2], 0, w)
            preds[:, 3] = torch.clamp(preds[:, 3], 0, h)

        preds = [*preds[:, None, :]]
        if targets is not None:
            return self.compute_loss(preds, targets, imgs[0].size()[-2:])
        return [{"boxes": pred, "labels": torch.ones(1, dtype=torch.int64), "scores": torch.ones(1)}
                for pred in preds]

    def compute_loss(self, preds, targets, size):
        criterion, loss_dict = nn.MSELoss(), {}
        size = torch.tensor([[*size[::-1], *size[::-1]]])
        for i, pred in enumerate(preds):
            loss_dict[i] = criterion(pred / size, targets[i]["boxes"][:1] / size)
        return loss_dict


# ------------------------------------------------------------------ components/base_model.py
@dataclass(eq=False)
class BaseGlassesModel(nn.Module):
    task: str
    kind: str = "eyes"
    size: str = "small"

    def __post_init__(self):
        super().__init__()
        self.model = self.create_model(self.size)

    @staticmethod
    def create_model(model_name: str) -> nn.Module:
        raise NotImplementedError

    def predict(self, image, format: Callable = lambda x: str(x), input_size=(64, 64)):
        """Predicts based on the model specified by the child class.  `image`
        is an RGB uint8 array (H, W, 3) or a list of them."""
        mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
        device = next(iter(self.model.parameters())).device
        xs, preds, is_multiple = [], [], True

        if isinstance(image, np.ndarray):
            image = [image]
            is_multiple = False

        original_images = []
        for img in image:
            original_images.append(img)
            x = torch.from_numpy(img).permute(2, 0, 1).float() / 255.0
            if input_size is not None:
                x = F.interpolate(x[None], size=input_size[::-1], mode="bilinear", align_corners=False)[0]
            xs.append((x - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None])

        with eval_infer_mode(self.model):
            # Stack and cast to device; perform forward pass
            pred = self.forward(torch.stack(xs).to(device))

        for i, pred in enumerate(pred):
            preds.append(format(original_images[i], pred))

        return preds if is_multiple else preds[0]

    def forward(self, x):
        return self.model(x)


# ------------------------------------------------------------------ detector.py
@dataclass(eq=False)
class GlassesDetector(BaseGlassesModel):
    task: str = "detection"

    @staticmethod
    def create_model(model_name: str) -> nn.Module:
        assert model_name == "small"
        return TinyBinaryDetector()

    def predict(self, image, format="int", output_size=None, input_size=(64, 64)):
        def verify_bboxes(ori: np.ndarray, boxes: torch.Tensor):
            # Set output size to original size if not specified
            w, h = output_size if output_size else (ori.shape[1], ori.shape[0])

            if input_size is not None and input_size != (w, h):
                # Convert bboxes to output size
                boxes[:, 0] = boxes[:, 0] * w / input_size[0]  # raises
                boxes[:, 1] = boxes[:, 1] * h / input_size[1]
                boxes[:, 2] = boxes[:, 2] * w / input_size[0]
                boxes[:, 3] = boxes[:, 3] * h / input_size[1]

            return boxes

        if format == "int":
            def format_fn(ori, pred):
                pred = verify_bboxes(ori, pred)
                return [[int(p.item()) for p in b] for b in pred]
        elif format == "str":
            def format_fn(ori, pred):
                pred = verify_bboxes(ori, pred)
                return "BBoxes: " + "; ".join(" ".join(map(str, map(int, b))) for b in pred)
        elif format == "float":
            def format_fn(ori, pred):
                w, h = input_size
                pred = pred / torch.tensor([w, h, w, h])
                return [[float(p.item()) for p in b] for b in pred]
        else:
            raise ValueError(f"{format} is not a valid choice!")

        return super().predict(image, format_fn, input_size)

    def forward(self, x):
        return [pred["boxes"] for pred in self.model([*x])]


# ------------------------------------------------------------------ training + usage
def synthetic_faces(n, size=64):
    imgs, targets = [], []
    for _ in range(n):
        img = torch.rand(3, size, size) * 0.2
        x0, y0 = np.random.randint(4, size // 2, 2)
        bw, bh = np.random.randint(16, size // 2, 2)
        img[:, y0:y0 + bh, x0:x0 + bw] += 0.8
        imgs.append(img)
        targets.append({"boxes": torch.tensor([[x0, y0, x0 + bw, y0 + bh]], dtype=torch.float),
                        "labels": torch.ones(1, dtype=torch.int64)})
    return imgs, targets


def train(det: GlassesDetector, steps=3, batch_size=8):
    optimizer = torch.optim.AdamW(det.model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)
    det.model.train()
    for step in range(steps):
        imgs, targets = synthetic_faces(batch_size)
        loss = sum(det.model(imgs, targets).values()) / batch_size
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step(loss.item())
        print(f"step {step}: regression loss {loss.item():.4f}")


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    det = GlassesDetector(kind="eyes", size="small")
    train(det)
    raw = [(np.random.rand(120, 96, 3) * 255).astype(np.uint8) for _ in range(3)]
    print(det.predict(raw, format="int"))
    print(det.predict(raw[0], format="str", output_size=(48, 60)))
