# expect: inplace_version
# source: https://github.com/thomasjpfan/pytorch_refinenet/issues/2
"""Train a small 4-cascade RefineNet (blocks: RCU, multi-resolution fusion,
chained residual pooling) for binary foreground segmentation on synthetic 64x64 images with
bright discs as the foreground."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from refinenet import RefineNet4Cascade

torch.manual_seed(0)

IMG_SIZE = 64


def make_batch(n):
    yy, xx = torch.meshgrid(torch.arange(IMG_SIZE), torch.arange(IMG_SIZE), indexing="ij")
    cx = torch.randint(16, 48, (n, 1, 1))
    cy = torch.randint(16, 48, (n, 1, 1))
    r = torch.randint(6, 14, (n, 1, 1))
    mask = (((xx - cx) ** 2 + (yy - cy) ** 2) <= r ** 2).float().unsqueeze(1)
    img = mask.repeat(1, 3, 1, 1) * 0.8 + 0.2 * torch.rand(n, 3, IMG_SIZE, IMG_SIZE)
    return img, mask


model = RefineNet4Cascade((3, IMG_SIZE), num_classes=1, features=16)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.BCEWithLogitsLoss()

for step in range(3):
    images, masks = make_batch(4)
    logits = model(images)
    logits = F.interpolate(logits, size=masks.shape[-2:], mode="bilinear", align_corners=False)
    loss = criterion(logits, masks)

    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
