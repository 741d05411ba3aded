# expect: nonscalar_backward
# source: https://github.com/xiaoyufenfei/Efficient-Segmentation-Networks/issues/7
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
IGNORE = 255


def lovasz_grad(gt_sorted):
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1. - intersection / union
    jaccard[1:] = jaccard[1:] - jaccard[0:-1]
    return jaccard


def lovasz_softmax_flat(probas, labels, classes='present'):
    if probas.numel() == 0:
        # only void pixels, the gradients should be 0
        return probas * 0.
    losses = []
    for c in range(probas.size(1)):
        fg = (labels == c).float()
        if classes == 'present' and fg.sum() == 0:
            continue
        errors = (fg - probas[:, c]).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        losses.append(torch.dot(errors_sorted, lovasz_grad(fg[perm])))
    return sum(losses) / len(losses)


def flatten_probas(probas, labels, ignore=None):
    B, C, H, W = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)
    labels = labels.view(-1)
    valid = (labels != ignore)
    return probas[valid.nonzero().squeeze()], labels[valid]


class LovaszSoftmax(nn.Module):
    def __init__(self, ignore_index=255):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, output, target):
        logits = F.softmax(output, dim=1)
        return lovasz_softmax_flat(*flatten_probas(logits, target, self.ignore_index))


model = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.Conv2d(16, 19, 1), nn.Upsample(scale_factor=2, mode='bilinear'))
criterion = LovaszSoftmax(ignore_index=IGNORE)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)

# random 32x32 crops; the 4th crop lands entirely on the ego-vehicle / void region
batches = []
for it in range(6):
    images = torch.randn(2, 3, 32, 32)
    labels = torch.randint(0, 19, (2, 32, 32))
    if it == 3:
        labels.fill_(IGNORE)
    batches.append((images, labels))

model.train()
for iteration, (images, labels) in enumerate(batches):
    output = model(images)
    loss = criterion(output, labels.long())
    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
    print('iter: (%d/%d) loss: %.3f' % (iteration + 1, len(batches), loss.item()))
