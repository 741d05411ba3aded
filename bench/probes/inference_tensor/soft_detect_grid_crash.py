# expect: inference_tensor
# source: https://github.com/xtcpete/rdd/issues/11
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def simple_nms(scores, nms_radius):
    zeros = torch.zeros_like(scores)
    max_mask = scores == F.max_pool2d(scores, kernel_size=nms_radius * 2 + 1, stride=1, padding=nms_radius)
    return torch.where(max_mask, scores, zeros)


class SoftDetect(nn.Module):
    def __init__(self, radius=2, top_k=32, temperature=0.1):
        super().__init__()
        self.radius = radius
        self.top_k = top_k
        self.temperature = temperature
        self.kernel_size = 2 * radius + 1
        self.unfold = nn.Unfold(kernel_size=self.kernel_size, padding=radius)
        self.hw_grid = None

    def detect_keypoints(self, scores_map):
        b, c, h, w = scores_map.shape
        nms_scores = simple_nms(scores_map.detach(), self.radius)
        nms_scores[:, :, : self.radius, :] = 0
        nms_scores[:, :, :, : self.radius] = 0
        nms_scores[:, :, h - self.radius :, :] = 0
        nms_scores[:, :, :, w - self.radius :] = 0
        indices_keypoints = torch.topk(nms_scores.view(b, -1), self.top_k).indices

        patches = self.unfold(scores_map)
        if self.hw_grid is None:
            x = torch.linspace(-self.radius, self.radius, self.kernel_size)
            self.hw_grid = torch.stack(torch.meshgrid([x, x], indexing="ij")).view(2, -1).t()[:, [1, 0]]

        keypoints = []
        for b_idx in range(b):
            patch = patches[b_idx].t()
            indices_kpt = indices_keypoints[b_idx]
            patch_scores = patch[indices_kpt]
            max_v = patch_scores.max(dim=1).values.detach()[:, None]
            x_exp = ((patch_scores - max_v) / self.temperature).exp()
            xy_residual = x_exp @ self.hw_grid / x_exp.sum(dim=1)[:, None]  # raises
            keypoints_xy_nms = torch.stack([indices_kpt % w, torch.div(indices_kpt, w, rounding_mode="trunc")], dim=1)
            keypoints.append(keypoints_xy_nms + xy_residual)
        return keypoints


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 1, 3, padding=1))
        self.softdetect = SoftDetect()

    def forward(self, img):
        return torch.sigmoid(self.net(img))


model = Detector()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
images = torch.rand(4, 1, 32, 32)

model.eval()
with torch.inference_mode():
    kps = model.softdetect.detect_keypoints(model(images[:1]))
    print("sanity check, keypoints:", kps[0].shape)

model.train()
for step in range(3):
    scores_map = model(images)
    kps = model.softdetect.detect_keypoints(scores_map)
    loss = sum(((k - k.round()) ** 2).mean() for k in kps) - scores_map.mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
