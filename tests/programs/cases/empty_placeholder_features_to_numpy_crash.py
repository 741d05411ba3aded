# expect: numpy_requires_grad
# shape: a re-identification helper returns the model's features for the crops, or an empty numpy array when there are none; each detection converts its own feature row to numpy, with gradients recorded: indexing the empty placeholder would raise first, so every row indexed is the tensor
import numpy as np
import torch
import torch.nn as nn

reid = nn.Linear(6, 4)


def features_for(crops):
    if crops:
        return reid(torch.stack(crops))
    return np.array([])


class Detection:
    def __init__(self, box, feature):
        self.box = box
        self.feature = np.asarray(feature, dtype=np.float32)  # raises


crops = [row for row in torch.randn(3, 6) if row.abs().sum() > 0]
boxes = torch.rand(len(crops), 4)
feats = features_for(crops)
detections = [Detection(box, feats[i]) for i, box in enumerate(boxes.tolist())]
print(len(detections))
