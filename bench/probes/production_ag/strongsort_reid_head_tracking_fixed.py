# expect: clean
# source: https://github.com/mikel-brostrom/boxmot/issues/721
"""Head tracking: a head detector feeding the StrongSORT tracker.

The application layer (launch / tracker wrapper) follows the issue: an asyncio
main loop runs a head detector on each frame and hands the detections to a
wrapper around StrongSORT from the Yolov5_StrongSORT_OSNet code base.
StrongSORT extracts appearance embeddings with an OSNet-like ReID network,
builds `Detection` objects, and associates them to tracks with an EMA of
appearance features and IoU gating.  Synthetic frames, CPU.
"""
import asyncio
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = SimpleNamespace(
    STRONGSORT=SimpleNamespace(MAX_DIST=0.4, MAX_IOU_DISTANCE=0.8, MAX_AGE=30,
                               N_INIT=2, NN_BUDGET=100, EMA_ALPHA=0.9, MC_LAMBDA=0.995),
    frames=4, img_h=96, img_w=128, conf_thres=0.3, seed=5,
)


class OSNetLite(nn.Module):
    def __init__(self, feat_dim=32):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(32, feat_dim)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.conv(x), 1).flatten(1))


class ReIDDetectMultiBackend(nn.Module):
    """Wraps the ReID weights; preprocesses BGR crops and returns embeddings."""

    def __init__(self, feat_dim=32, size=(32, 16)):
        super().__init__()
        self.model = OSNetLite(feat_dim).eval()
        self.size = size
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def _preprocess(self, im_crops):
        batch = []
        for im in im_crops:
            t = torch.from_numpy(np.ascontiguousarray(im[..., ::-1])).permute(2, 0, 1).float() / 255.0
            batch.append(F.interpolate(t[None], size=self.size, mode="bilinear", align_corners=False))
        return (torch.cat(batch) - self.mean) / self.std

    def forward(self, im_crops):
        features = self.model(self._preprocess(im_crops))
        return F.normalize(features, dim=1)


class Detection:
    def __init__(self, tlwh, confidence, feature):
        self.tlwh = np.asarray(tlwh, dtype=np.float64)
        self.confidence = float(confidence)
        self.feature = np.asarray(feature.cpu(), dtype=np.float32)

    def to_tlbr(self):
        ret = self.tlwh.copy()
        ret[2:] += ret[:2]
        return ret


def iou(bbox, candidates):
    bbox_tl, bbox_br = bbox[:2], bbox[:2] + bbox[2:]
    tl = np.maximum(bbox_tl, candidates[:, :2])
    br = np.minimum(bbox_br, candidates[:, :2] + candidates[:, 2:])
    wh = np.maximum(0.0, br - tl)
    inter = wh.prod(axis=1)
    return inter / (bbox[2:].prod() + candidates[:, 2:].prod(axis=1) - inter)


class Track:
    def __init__(self, detection, track_id, n_init, max_age, ema_alpha):
        self.tlwh = detection.tlwh.copy()
        self.track_id = track_id
        self.hits, self.age, self.time_since_update = 1, 1, 0
        self.n_init, self.max_age, self.ema_alpha = n_init, max_age, ema_alpha
        self.feature = detection.feature / np.linalg.norm(detection.feature)
        self.state = "tentative"

    def predict(self):
        self.age += 1
        self.time_since_update += 1

    def update(self, detection):
        self.tlwh = 0.7 * detection.tlwh + 0.3 * self.tlwh
        smooth = self.ema_alpha * self.feature + (1 - self.ema_alpha) * detection.feature
        self.feature = smooth / np.linalg.norm(smooth)
        self.hits += 1
        self.time_since_update = 0
        if self.state == "tentative" and self.hits >= self.n_init:
            self.state = "confirmed"

    def is_deleted(self):
        return self.time_since_update > self.max_age


class Tracker:
    def __init__(self, max_dist, max_iou_distance, max_age, n_init, ema_alpha):
        self.max_dist, self.max_iou_distance = max_dist, max_iou_distance
        self.max_age, self.n_init, self.ema_alpha = max_age, n_init, ema_alpha
        self.tracks, self._next_id = [], 1

    def predict(self):
        for t in self.tracks:
            t.predict()

    def update(self, detections):
        unmatched = list(range(len(detections)))
        for track in self.tracks:
            if not unmatched:
                break
            cands = np.stack([detections[i].tlwh for i in unmatched])
            feats = np.stack([detections[i].feature for i in unmatched])
            cost = 1.0 - feats @ track.feature
            cost[(1.0 - iou(track.tlwh, cands)) > self.max_iou_distance] = np.inf
            j = int(np.argmin(cost))
            if cost[j] < self.max_dist:
                track.update(detections[unmatched.pop(j)])
        for i in unmatched:
            self.tracks.append(Track(detections[i], self._next_id, self.n_init, self.max_age, self.ema_alpha))
            self._next_id += 1
        self.tracks = [t for t in self.tracks if not t.is_deleted()]


class StrongSORT:
    def __init__(self, model_weights=None, max_dist=0.2, max_iou_distance=0.7, max_age=70,
                 n_init=3, nn_budget=100, mc_lambda=0.995, ema_alpha=0.9):
        self.model = ReIDDetectMultiBackend()
        self.tracker = Tracker(max_dist, max_iou_distance, max_age, n_init, ema_alpha)

    def update(self, dets, ori_img):
        xyxys, confs = dets[:, 0:4], dets[:, 4]
        self.height, self.width = ori_img.shape[:2]
        bbox_xywh = self._xyxy_to_xywh(xyxys)
        features = self._get_features(bbox_xywh, ori_img)
        bbox_tlwh = self._xywh_to_tlwh(bbox_xywh)
        detections = [Detection(bbox_tlwh[i], conf, features[i]) for i, conf in enumerate(confs.tolist())]
        self.tracker.predict()
        self.tracker.update(detections)
        return np.array([[*t.tlwh, t.track_id] for t in self.tracker.tracks if t.state == "confirmed"])

    @staticmethod
    def _xyxy_to_xywh(xyxy):
        xyxy = np.asarray(xyxy, dtype=np.float64)
        return np.stack([(xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2,
                         xyxy[:, 2] - xyxy[:, 0], xyxy[:, 3] - xyxy[:, 1]], axis=1)

    @staticmethod
    def _xywh_to_tlwh(bbox_xywh):
        bbox_tlwh = bbox_xywh.copy()
        bbox_tlwh[:, 0] = bbox_xywh[:, 0] - bbox_xywh[:, 2] / 2.0
        bbox_tlwh[:, 1] = bbox_xywh[:, 1] - bbox_xywh[:, 3] / 2.0
        return bbox_tlwh

    def _xywh_to_xyxy(self, bbox_xywh):
        x, y, w, h = bbox_xywh
        x1, x2 = max(int(x - w / 2), 0), min(int(x + w / 2), self.width - 1)
        y1, y2 = max(int(y - h / 2), 0), min(int(y + h / 2), self.height - 1)
        return x1, y1, x2, y2

    def _get_features(self, bbox_xywh, ori_img):
        im_crops = []
        for box in bbox_xywh:
            x1, y1, x2, y2 = self._xywh_to_xyxy(box)
            im_crops.append(ori_img[y1:max(y2, y1 + 2), x1:max(x2, x1 + 2)])
        if im_crops:
            return self.model(im_crops)
        return np.array([])


class HeadDetector(nn.Module):
    """Tiny anchor-free head detector; `predict` returns [x1, y1, x2, y2, conf, cls]."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.ReLU(), nn.Conv2d(8, 5, 1))

    @torch.no_grad()
    def predict(self, im, conf_thres):
        out = self.net(im)[0]                      # 5 x H/4 x W/4
        conf = out[4].sigmoid().flatten()
        keep = conf.argsort(descending=True)[:4]
        h, w = out.shape[1:]
        ys, xs = (keep // w).float(), (keep % w).float()
        cx, cy = (xs + 0.5) * 4, (ys + 0.5) * 4
        bw = bh = 12.0 + 4.0 * out[2].flatten()[keep].sigmoid()
        det = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2,
                           conf[keep], torch.zeros_like(cx)], dim=1)
        return det[det[:, 4] > conf_thres]


class HeadTracker:
    """tracker.py of the head-detection project: wraps StrongSORT."""

    def __init__(self, c):
        s = c.STRONGSORT
        self._tracker = StrongSORT(max_dist=s.MAX_DIST, max_iou_distance=s.MAX_IOU_DISTANCE,
                                   max_age=s.MAX_AGE, n_init=s.N_INIT, nn_budget=s.NN_BUDGET,
                                   mc_lambda=s.MC_LAMBDA, ema_alpha=s.EMA_ALPHA)

    @torch.no_grad()
    def update(self, det, im0):
        if det is None or not len(det):
            return np.empty((0, 5))
        output = self._tracker.update(det.cpu(), im0)
        return output


async def main_async():
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    detector = HeadDetector().eval()
    tracker = HeadTracker(cfg)
    for frame_idx in range(cfg.frames):
        im0 = rng.integers(0, 255, (cfg.img_h, cfg.img_w, 3), dtype=np.uint8)
        im = torch.from_numpy(im0).permute(2, 0, 1).float()[None] / 255.0
        det = detector.predict(im, cfg.conf_thres)
        result = tracker.update(det, im0)
        print(f"frame {frame_idx}: {len(det)} heads, {len(result)} confirmed tracks")
        await asyncio.sleep(0)


def main():
    asyncio.run(main_async())


if __name__ == "__main__":
    main()
