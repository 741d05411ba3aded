# expect: clean
# source: https://github.com/NielsRogge/Transformers-Tutorials/pull/178
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)

NUM_QUERIES, NUM_CLASSES, D = 20, 5, 32
IMG_W, IMG_H = 640, 480


class ToyDetr(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Conv2d(3, D, kernel_size=16, stride=16)
        self.query_embed = nn.Embedding(NUM_QUERIES, D)
        self.attn = nn.MultiheadAttention(D, num_heads=4, batch_first=True)
        self.class_head = nn.Linear(D, NUM_CLASSES + 1)
        self.box_head = nn.Linear(D, 4)

    def forward(self, pixel_values):
        mem = self.backbone(pixel_values).flatten(2).transpose(1, 2)
        q = self.query_embed.weight.unsqueeze(0).expand(mem.size(0), -1, -1)
        hs, attn = self.attn(q, mem, mem)
        return {"logits": self.class_head(hs), "pred_boxes": self.box_head(hs).sigmoid(),
                "cross_attentions": attn}


def box_cxcywh_to_xyxy(x):
    x_c, y_c, w, h = x.unbind(1)
    return torch.stack([x_c - 0.5 * w, y_c - 0.5 * h, x_c + 0.5 * w, y_c + 0.5 * h], dim=1)


def rescale_bboxes(out_bbox, size):
    img_w, img_h = size
    return box_cxcywh_to_xyxy(out_bbox) * torch.tensor([img_w, img_h, img_w, img_h])


model = ToyDetr()
model.eval()
pixel_values = torch.randn(1, 3, IMG_H // 2, IMG_W // 2)
outputs = model(pixel_values)

probas = outputs["logits"].softmax(-1)[0, :, :-1]
keep = probas.max(-1).values > 0.2
bboxes_scaled = rescale_bboxes(outputs["pred_boxes"][0, keep], (IMG_W, IMG_H))
dec_attn = outputs["cross_attentions"][0]

patches = []
for idx, (xmin, ymin, xmax, ymax) in zip(keep.nonzero(), bboxes_scaled):
    xmin, ymin, xmax, ymax = map(lambda x: x.detach(), (xmin, ymin, xmax, ymax))
    rect = np.array([xmin, ymin, xmax - xmin, ymax - ymin])
    focus = dec_attn[idx].argmax().item()
    patches.append((rect.round(1), focus))

for rect, focus in patches:
    print("box (x, y, w, h):", rect, "attends to patch", focus)
print(f"{len(patches)} boxes kept out of {NUM_QUERIES}")
