# expect: numpy_requires_grad
# source: https://github.com/WongKinYiu/yolov7/pull/333
import numpy as np
import torch
import torch.nn as nn
torch.manual_seed(0)
np.random.seed(0)


class PoseHead(nn.Module):
    """Stand-in for yolov7-w6-pose: per-anchor [x, y, w, h, obj, cls, 17 x (kx, ky, kconf)]."""
    def __init__(self, nkpt=17):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.SiLU())
        self.head = nn.Conv2d(32, 6 + nkpt * 3, 1)

    def forward(self, x):
        p = self.head(self.backbone(x))                      # (B, 57, H/4, W/4)
        p = p.flatten(2).permute(0, 2, 1).sigmoid()          # (B, N, 57)
        p = torch.cat([p[..., :4] * 64, p[..., 4:6], p[..., 6:] * 64], -1)
        return p, None


def xywh2xyxy(x):
    y = x.clone()
    y[:, 0] = x[:, 0] - x[:, 2] / 2
    y[:, 1] = x[:, 1] - x[:, 3] / 2
    y[:, 2] = x[:, 0] + x[:, 2] / 2
    y[:, 3] = x[:, 1] + x[:, 3] / 2
    return y


def xyxy2xywh(x):
    y = np.copy(x)
    y[:, 0] = (x[:, 0] + x[:, 2]) / 2
    y[:, 1] = (x[:, 1] + x[:, 3]) / 2
    y[:, 2] = x[:, 2] - x[:, 0]
    y[:, 3] = x[:, 3] - x[:, 1]
    return y


def non_max_suppression_kpt(prediction, conf_thres=0.25, max_det=20):
    output = []
    for x in prediction:
        x = x[x[:, 4] > conf_thres]
        x[:, 5:6] *= x[:, 4:5]
        box = xywh2xyxy(x[:, :4])
        conf, j = x[:, 5:6].max(1, keepdim=True)
        x = torch.cat((box, conf, j.float(), x[:, 6:]), 1)[conf.view(-1) > conf_thres]
        output.append(x[x[:, 4].argsort(descending=True)[:max_det]])
    return output


def output_to_keypoint(output):
    # Convert model output to target format [batch_id, class_id, x, y, w, h, conf, kpts...]
    targets = []
    for i, o in enumerate(output):
        kpts = o[:, 6:]
        o = o[:, :6]
        for index, (*box, conf, cls) in enumerate(o.cpu().numpy()):  # raises
            targets.append([i, cls, *list(*xyxy2xywh(np.array(box)[None])), conf, *list(kpts.cpu().numpy()[index])])
    return np.array(targets)


model = PoseHead()
_ = model.eval()
image = np.random.rand(64, 64, 3).astype(np.float32)      # letterboxed frame, HWC in [0, 1]
image = torch.tensor(np.array([image.transpose(2, 0, 1)]))

output, _ = model(image)
output = non_max_suppression_kpt(output, 0.25)
output = output_to_keypoint(output)
nimg = (image[0].permute(1, 2, 0) * 255).numpy().astype(np.uint8)
for idx in range(output.shape[0]):
    kpts = output[idx, 7:].reshape(-1, 3)
    for kx, ky, kc in kpts:
        if kc > 0.5:
            nimg[int(ky) % 64, int(kx) % 64] = 255
print(output.shape, nimg.mean())
