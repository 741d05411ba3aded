# expect: inplace_version
# shape: a view helper scales the features it is given in place before its projection head; the consistency loss compares two views of the same features in one call, so the first view's LayerNorm saved the features that the second call's `*=` then modified
import torch
import torch.nn as nn
import torch.nn.functional as F

backbone, head = nn.Linear(6, 6), nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 3))


def view(features, scale):
    features *= scale
    return head(features)


features = backbone(torch.randn(4, 6))
loss = F.mse_loss(view(features, 0.9), view(features, 1.1))
loss.backward()  # raises
