# expect: no_grad_fn
# source: https://github.com/ultralytics/ultralytics/issues/10071
"""Adversarial "block" attack against a YOLOv8-style detector (confidence-suppression loss).

A small anchor-free detector (backbone + decoupled Detect head) is wrapped in a YOLO-like
model object whose ``__call__`` runs a cached predictor (preprocess -> inference -> NMS ->
Results/Boxes).  An attack object pastes a learnable square block onto each image and
minimises the summed detection confidence with Adam; every few steps it reports how many
objects the detector still finds.  Weights and images are random and seeded.
"""
import functools
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device('cpu')


# ultralytics/utils/torch_utils.py
def smart_inference_mode():
    """Applies torch.inference_mode() decorator if torch>=1.9.0 else torch.no_grad() decorator."""
    def decorate(fn):
        if torch.is_inference_mode_enabled():
            return fn
        return (torch.inference_mode if hasattr(torch, 'inference_mode') else torch.no_grad)()(fn)
    return decorate


# ultralytics/nn/modules
class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Detect(nn.Module):
    """Decoupled anchor-free head; returns (B, 4 + nc, A) with xywh boxes and class scores."""

    def __init__(self, nc, ch, strides):
        super().__init__()
        self.nc, self.strides = nc, strides
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(c, 16, 3), nn.Conv2d(16, 4, 1)) for c in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(c, 16, 3), nn.Conv2d(16, nc, 1)) for c in ch)

    @staticmethod
    def make_anchors(feats, strides):
        anchor_points, stride_tensor = [], []
        for f, s in zip(feats, strides):
            h, w = f.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing='ij')
            anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
            stride_tensor.append(torch.full((h * w, 1), float(s)))
        return torch.cat(anchor_points), torch.cat(stride_tensor)

    def forward(self, x):
        box = torch.cat([self.cv2[i](xi).flatten(2) for i, xi in enumerate(x)], 2)
        cls = torch.cat([self.cv3[i](xi).flatten(2) for i, xi in enumerate(x)], 2)
        anchors, strides = self.make_anchors(x, self.strides)
        lt, rb = box.chunk(2, 1)
        a = anchors.t().unsqueeze(0)
        x1y1, x2y2 = a - F.softplus(lt), a + F.softplus(rb)
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides.t()
        return torch.cat((xywh, cls.sigmoid()), 1)


class DetectionModel(nn.Module):
    def __init__(self, nc=3):
        super().__init__()
        self.b1 = nn.Sequential(Conv(3, 8, 3, 2), Conv(8, 16, 3, 2), Conv(16, 16, 3, 2))   # P3/8
        self.b2 = Conv(16, 32, 3, 2)                                                      # P4/16
        self.detect = Detect(nc, (16, 32), (8, 16))
        self.names = {i: f'class{i}' for i in range(nc)}

    def forward(self, x):
        p3 = self.b1(x)
        p4 = self.b2(p3)
        return self.detect([p3, p4])


# ultralytics/utils/ops.py
def xywh2xyxy(x):
    y = x.clone()
    y[..., 0], y[..., 1] = x[..., 0] - x[..., 2] / 2, x[..., 1] - x[..., 3] / 2
    y[..., 2], y[..., 3] = x[..., 0] + x[..., 2] / 2, x[..., 1] + x[..., 3] / 2
    return y


def box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt, rb = torch.max(a[:, None, :2], b[:, :2]), torch.min(a[:, None, 2:], b[:, 2:])
    inter = (rb - lt).clamp(0).prod(2)
    return inter / (area_a[:, None] + area_b - inter + 1e-7)


def nms(boxes, scores, iou_thres):
    order, keep = scores.argsort(descending=True), []
    while order.numel():
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        ious = box_iou(boxes[i:i + 1], boxes[order[1:]])[0]
        order = order[1:][ious <= iou_thres]
    return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.long)


def non_max_suppression(prediction, conf_thres=0.25, iou_thres=0.7, max_det=300):
    nc = prediction.shape[1] - 4
    output = []
    for xi, x in enumerate(prediction.transpose(-1, -2)):           # (A, 4 + nc)
        box, cls = x.split((4, nc), 1)
        conf, j = cls.max(1, keepdim=True)
        x = torch.cat((xywh2xyxy(box), conf, j.float()), 1)[conf.view(-1) > conf_thres]
        if not x.shape[0]:
            output.append(torch.zeros((0, 6)))
            continue
        i = nms(x[:, :4] + x[:, 5:6] * 7680, x[:, 4], iou_thres)[:max_det]
        output.append(x[i])
    return output


# ultralytics/engine/results.py
class Boxes:
    def __init__(self, boxes, orig_shape):
        self.data, self.orig_shape = boxes, orig_shape

    @property
    def xyxy(self):
        return self.data[:, :4]

    @property
    def conf(self):
        return self.data[:, -2]

    @property
    def cls(self):
        return self.data[:, -1]

    def __len__(self):
        return len(self.data)


class Results:
    def __init__(self, orig_img, names, boxes):
        self.orig_shape = tuple(orig_img.shape[-2:])
        self.names = names
        self.boxes = Boxes(boxes, self.orig_shape)


# ultralytics/engine/predictor.py
class BasePredictor:
    def __init__(self, overrides):
        self.args = SimpleNamespace(conf=0.25, iou=0.7, max_det=300, verbose=True, half=False)
        self.args.__dict__.update(overrides)
        self.model = None

    def setup_model(self, model):
        self.model = model.eval()

    def preprocess(self, im):
        not_tensor = not isinstance(im, torch.Tensor)
        if not_tensor:
            im = torch.from_numpy(im).permute(0, 3, 1, 2).contiguous()
        im = im.to(device)
        im = im.half() if self.args.half else im.float()
        if not_tensor:
            im /= 255  # 0 - 255 to 0.0 - 1.0
        return im

    def inference(self, im):
        return self.model(im)

    def postprocess(self, preds, img):
        preds = non_max_suppression(preds, self.args.conf, self.args.iou, max_det=self.args.max_det)
        return [Results(img[i], self.model.names, pred) for i, pred in enumerate(preds)]

    def __call__(self, source, model=None):
        return list(self.stream_inference(source, model))

    @smart_inference_mode()
    def stream_inference(self, source, model=None):
        if self.model is None:
            self.setup_model(model)
        im = self.preprocess(source)
        preds = self.inference(im)
        for r in self.postprocess(preds, im):
            yield r


# ultralytics/engine/model.py
class YOLO:
    def __init__(self, nc=3):
        self.model = DetectionModel(nc)
        self.predictor = None  # reuse predictor

    def __call__(self, source, **kwargs):
        return self.predict(source, **kwargs)

    def predict(self, source, **kwargs):
        if not self.predictor:
            self.predictor = BasePredictor(overrides=kwargs)
            self.predictor.setup_model(self.model)
        else:
            self.predictor.args.__dict__.update(kwargs)
        return self.predictor(source)


# attack
model = YOLO(nc=3)


def predict_images_tensor(img_tensor):
    if img_tensor.ndim == 3:
        img_tensor = img_tensor.unsqueeze(0)
    img_tensor = img_tensor.to(device)
    results = model(img_tensor, verbose=False)
    if isinstance(results, list):
        results = results[0]
    confs = results.boxes.conf
    conf_loss = torch.sum(confs).to(device)
    return conf_loss


class AdversarialBlockAttack:
    def __init__(self, cfg):
        self.cfg = cfg
        self.block = torch.rand(3, cfg.block_size, cfg.block_size, device=device, requires_grad=True)
        self.optimizer = torch.optim.Adam([self.block], lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=cfg.lr_step, gamma=0.5)
        self.history = []

    @functools.cached_property
    def mask(self):
        m = torch.zeros(1, self.cfg.imgsz, self.cfg.imgsz, device=device)
        y0, x0 = self.cfg.block_xy
        m[:, y0:y0 + self.cfg.block_size, x0:x0 + self.cfg.block_size] = 1.0
        return m

    def apply_block(self, img):
        pad = self.cfg.imgsz - self.cfg.block_size
        y0, x0 = self.cfg.block_xy
        canvas = F.pad(self.block.clamp(0, 1), (x0, pad - x0, y0, pad - y0))
        return img * (1 - self.mask) + canvas * self.mask

    def train_step(self, img):
        self.optimizer.zero_grad()
        adv_img = self.apply_block(img)
        adv_loss = predict_images_tensor(adv_img)
        adv_loss.backward()  # raises
        self.optimizer.step()
        self.scheduler.step()
        return adv_loss.item()

    def evaluate(self, images):
        with torch.no_grad():
            adv = torch.stack([self.apply_block(im) for im in images])
        results = model(adv, verbose=False)
        return sum(len(r.boxes) for r in results) / len(results)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = SimpleNamespace(imgsz=64, block_size=16, block_xy=(24, 24), lr=0.03, lr_step=10,
                          steps=6, eval_every=3, n_images=4)
    images = torch.rand(cfg.n_images, 3, cfg.imgsz, cfg.imgsz)
    attack = AdversarialBlockAttack(cfg)
    print('clean detections / image: %.1f' % attack.evaluate(images))
    for step in range(cfg.steps):
        loss = attack.train_step(images[step % cfg.n_images])
        attack.history.append(loss)
        if (step + 1) % cfg.eval_every == 0:
            print('step %d conf_loss %.3f detections/img %.1f' % (step + 1, loss, attack.evaluate(images)))


if __name__ == '__main__':
    main()
