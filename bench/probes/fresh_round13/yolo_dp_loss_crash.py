# expect: nonscalar_backward
# source: https://github.com/eriklindernoren/PyTorch-YOLOv3/issues/331
"""Training a tiny YOLO-style detector wrapped for multi-device execution.

The Darknet-like model returns (loss, outputs) when targets are given.
Because this runs on CPU, `ReplicaParallel` stands in for
nn.DataParallel(model, device_ids=[0, 1]): it scatters the batch over the
replicas and gathers their outputs along dim 0.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Darknet(nn.Module):
    def __init__(self, num_anchors=3, num_classes=4):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.LeakyReLU(0.1),
                                      nn.Conv2d(8, 16, 3, 2, 1), nn.LeakyReLU(0.1))
        self.head = nn.Conv2d(16, num_anchors * (5 + num_classes), 1)

    def forward(self, x, targets=None):
        out = self.head(self.backbone(x))
        if targets is None:
            return out
        loss = nn.functional.mse_loss(out.sigmoid(), targets)
        return loss, out


class ReplicaParallel(nn.Module):
    def __init__(self, module, device_ids):
        super().__init__()
        self.module, self.device_ids = module, device_ids

    def forward(self, x, targets):
        results = [self.module(xc, tc) for xc, tc in
                   zip(x.chunk(len(self.device_ids)), targets.chunk(len(self.device_ids)))]
        losses = torch.stack([r[0] for r in results])
        outputs = torch.cat([r[1] for r in results])
        return losses, outputs


model = ReplicaParallel(Darknet(), device_ids=[0, 1])
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for batch_i in range(5):
    imgs = torch.rand(8, 3, 32, 32)
    targets = torch.rand(8, 27, 8, 8)
    loss, outputs = model(imgs, targets)
    loss.backward()  # raises
    optimizer.step()
    optimizer.zero_grad()
    print(f"batch {batch_i} loss {loss.sum().item():.4f}")
