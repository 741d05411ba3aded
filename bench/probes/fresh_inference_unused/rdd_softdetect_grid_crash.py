# expect: inference_tensor
# source: https://github.com/xtcpete/rdd/issues/11
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def simple_nms(scores, nms_radius: int):
    """ Fast Non-maximum suppression to remove nearby points """
    def max_pool(x):
        return F.max_pool2d(x, kernel_size=nms_radius * 2 + 1, stride=1, padding=nms_radius)

    zeros = torch.zeros_like(scores)
    max_mask = scores == max_pool(scores)
    for _ in range(2):
        supp_mask = max_pool(max_mask.float()) > 0
        supp_scores = torch.where(supp_mask, zeros, scores)
        new_max_mask = supp_scores == max_pool(supp_scores)
        max_mask = max_mask | (new_max_mask & (~supp_mask))
    return torch.where(max_mask, scores, zeros)


class SoftDetect(nn.Module):
    def __init__(self, radius=2, top_k=0, scores_th=0.2, n_limit=20000):
        super().__init__()
        self.radius = radius
        self.top_k = top_k
        self.scores_th = scores_th
        self.n_limit = n_limit
        self.kernel_size = 2 * self.radius + 1
        self.temperature = 0.1  # tuned temperature
        self.unfold = nn.Unfold(kernel_size=self.kernel_size, padding=self.radius)
        x = torch.linspace(-self.radius, self.radius, self.kernel_size)
        # (kernel_size*kernel_size) x 2 : (w,h)
        self.hw_grid = torch.stack(torch.meshgrid([x, x], indexing="ij")).view(2, -1).t()[:, [1, 0]]

    def detect_keypoints(self, scores_map, normalized_coordinates=True):
        b, c, h, w = scores_map.shape
        scores_nograd = scores_map.detach()
        nms_scores = simple_nms(scores_nograd, 2)
        nms_scores[:, :, :self.radius + 1, :] = 0
        nms_scores[:, :, :, :self.radius + 1] = 0
        nms_scores[:, :, h - self.radius:, :] = 0
        nms_scores[:, :, :, w - self.radius:] = 0

        topk = torch.topk(nms_scores.view(b, -1), self.top_k)
        indices_keypoints = topk.indices  # B x top_k

        # detect soft keypoints with grad backpropagation
        patches = self.unfold(scores_map)  # B x (kernel**2) x (H*W)
        self.hw_grid = self.hw_grid.to(patches)  # to device
        keypoints, scoredispersitys, kptscores = [], [], []
        for b_idx in range(b):
            patch = patches[b_idx].t()  # (H*W) x (kernel**2)
            indices_kpt = indices_keypoints[b_idx]
            patch_scores = patch[indices_kpt]  # M x (kernel**2)
            max_v = patch_scores.max(dim=1).values.detach()[:, None]
            x_exp = ((patch_scores - max_v) / self.temperature).exp()
            xy_residual = x_exp @ self.hw_grid / x_exp.sum(dim=1)[:, None]  # raises
            hw_grid_dist2 = torch.norm((self.hw_grid[None, :, :] - xy_residual[:, None, :]) / self.radius,
                                       dim=-1) ** 2
            scoredispersity = (x_exp * hw_grid_dist2).sum(dim=1) / x_exp.sum(dim=1)
            keypoints_xy_nms = torch.stack([indices_kpt % w, indices_kpt // w], dim=1)
            keypoints_xy = keypoints_xy_nms + xy_residual
            if normalized_coordinates:
                keypoints_xy = keypoints_xy / keypoints_xy.new_tensor([w - 1, h - 1]) * 2 - 1
            kptscore = F.grid_sample(scores_map[b_idx].unsqueeze(0), keypoints_xy.view(1, 1, -1, 2),
                                     mode='bilinear', align_corners=True)[0, 0, 0, :]
            keypoints.append(keypoints_xy)
            scoredispersitys.append(scoredispersity)
            kptscores.append(kptscore)
        return keypoints, scoredispersitys, kptscores

    def forward(self, scores_map, normalized_coordinates=True):
        keypoints, scoredispersitys, kptscores = self.detect_keypoints(scores_map, normalized_coordinates)
        return keypoints, kptscores, scoredispersitys


class Detector(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, dim, 3, padding=1), nn.ReLU(), nn.Conv2d(dim, dim, 3, padding=1), nn.ReLU())
        self.head = nn.Conv2d(dim, 1, 1)

    def forward(self, x):
        return torch.sigmoid(self.head(self.body(x)))


class Descriptor(nn.Module):
    def __init__(self, dim=32, stride=4):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(3, dim, stride, stride=stride)
        self.match_head = nn.Conv2d(dim, 1, 1)

    def forward(self, x):
        feats = self.conv(x)
        return feats, torch.sigmoid(self.match_head(feats))


class RDD(nn.Module):
    def __init__(self, detector, descriptor, detection_threshold=0.5, top_k=4096, train_detector=False):
        super().__init__()
        self.detector = detector
        self.descriptor = descriptor
        self.detection_threshold = detection_threshold
        self.top_k = top_k
        for p in self.detector.parameters():
            p.requires_grad = train_detector
        for p in self.descriptor.parameters():
            p.requires_grad = not train_detector
        self.softdetect = None
        self.stride = descriptor.stride

    def train(self, mode=True):
        super().train(mode)
        if self.softdetect is None:
            self.set_softdetect(top_k=500, scores_th=0.2)

    def eval(self):
        super().eval()
        self.set_softdetect(top_k=self.top_k, scores_th=0.01)

    def forward(self, samples):
        scoremap = self.detector(samples)
        feats, matchibility = self.descriptor(samples)
        return feats, scoremap, matchibility

    def set_softdetect(self, top_k=4096, scores_th=0.01):
        self.softdetect = SoftDetect(radius=2, top_k=top_k, scores_th=scores_th)

    @torch.inference_mode()
    def extract(self, x):
        if self.softdetect is None:
            self.eval()
        M1, K1, H1 = self.forward(x)
        M1 = F.normalize(M1, dim=1)
        keypoints, kptscores, scoredispersitys = self.softdetect(K1)
        kptscores = torch.vstack([kptscores[b].unsqueeze(0) for b in range(x.shape[0])])
        valid = kptscores > self.detection_threshold
        return [{'keypoints': keypoints[b][valid[b]], 'scores': kptscores[b][valid[b]]} for b in range(x.shape[0])]


def compute_correspondence(model, pred0, pred1):
    kps, score_dispersity, scores = model.softdetect.detect_keypoints(pred0['scores_map'])
    kps1, score_dispersity1, scores1 = model.softdetect.detect_keypoints(pred1['scores_map'])
    loss_disp = torch.stack([d.mean() for d in score_dispersity + score_dispersity1]).mean()
    loss_score = -torch.stack([s.mean() for s in scores + scores1]).mean()
    return loss_disp + loss_score


class Trainer:
    def __init__(self, args):
        self.args = args
        torch.manual_seed(args.seed)
        self.model = RDD(Detector(), Descriptor(), top_k=args.top_k, train_detector=args.train_detector)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
        self.steps = 0

    def sample_pair(self):
        image0 = torch.rand(self.args.batch_size, 3, self.args.size, self.args.size)
        image1 = torch.roll(image0, shifts=(2, 3), dims=(2, 3)) + 0.01 * torch.randn_like(image0)
        return {'image0': image0, 'image1': image1}

    def _inference(self, d):
        _, scores_map0, _ = self.model(d['image0'])
        _, scores_map1, _ = self.model(d['image1'])
        return compute_correspondence(self.model, {'scores_map': scores_map0}, {'scores_map': scores_map1})

    def validate(self, total_steps):
        with torch.inference_mode():
            self.model.eval()
            n_kpts = 0
            for _ in range(2):
                d = self.sample_pair()
                out = self.model.extract(d['image0'])
                n_kpts += sum(len(o['keypoints']) for o in out)
            print(f"[validate] step {total_steps}: {n_kpts} keypoints")

        self.model.train()

    def train(self):
        self.model.train()
        for epoch in range(self.args.epochs):
            for it in range(self.args.iters_per_epoch):
                d = self.sample_pair()
                loss = self._inference(d)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.steps += 1
                if self.steps % self.args.test_every_iter == 0:
                    self.validate(self.steps)
            print(f"epoch {epoch}: loss {loss.item():.4f}")


def parse_args():
    parser = argparse.ArgumentParser(description='Train RDD detector')
    parser.add_argument('--lr', type=float, default=1e-4)
    parser.add_argument('--weight_decay', type=float, default=1e-4)
    parser.add_argument('--batch_size', type=int, default=2)
    parser.add_argument('--size', type=int, default=64)
    parser.add_argument('--top_k', type=int, default=1024)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--iters_per_epoch', type=int, default=3)
    parser.add_argument('--test_every_iter', type=int, default=2)
    parser.add_argument('--train_detector', action='store_true', default=True)
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args([])


if __name__ == '__main__':
    args = parse_args()
    trainer = Trainer(args)
    trainer.train()
