# expect: clean
# source: https://github.com/kuangliu/pytorch-retinanet/issues/38
"""RetinaNet (FPN + focal loss) in one file: fpn.py, retinanet.py, encoder.py,
loss.py and a short train.py on synthetic images with random boxes.
Widths are reduced so that it runs on CPU in a few seconds."""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

torch.manual_seed(0)

# ---------------------------------------------------------------- fpn.py
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes, planes, stride=1):
        super(Bottleneck, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, self.expansion * planes, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(self.expansion * planes)
        self.downsample = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += self.downsample(x)
        return F.relu(out)


class FPN(nn.Module):
    def __init__(self, block, num_blocks, width=8, fpn_planes=32):
        super(FPN, self).__init__()
        self.in_planes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, width * 2, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, num_blocks[3], stride=2)
        self.conv6 = nn.Conv2d(width * 32, fpn_planes, kernel_size=3, stride=2, padding=1)
        self.conv7 = nn.Conv2d(fpn_planes, fpn_planes, kernel_size=3, stride=2, padding=1)
        self.latlayer1 = nn.Conv2d(width * 32, fpn_planes, kernel_size=1)
        self.latlayer2 = nn.Conv2d(width * 16, fpn_planes, kernel_size=1)
        self.latlayer3 = nn.Conv2d(width * 8, fpn_planes, kernel_size=1)
        self.toplayer1 = nn.Conv2d(fpn_planes, fpn_planes, kernel_size=3, padding=1)
        self.toplayer2 = nn.Conv2d(fpn_planes, fpn_planes, kernel_size=3, padding=1)

    def _make_layer(self, block, planes, num_blocks, stride):
        layers = []
        for s in [stride] + [1] * (num_blocks - 1):
            layers.append(block(self.in_planes, planes, s))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def _upsample_add(self, x, y):
        _, _, H, W = y.size()
        return F.interpolate(x, size=(H, W), mode='bilinear', align_corners=False) + y

    def forward(self, x):
        c1 = F.relu(self.bn1(self.conv1(x)))
        c1 = F.max_pool2d(c1, kernel_size=3, stride=2, padding=1)
        c2 = self.layer1(c1)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        p6 = self.conv6(c5)
        p7 = self.conv7(F.relu(p6))
        p5 = self.latlayer1(c5)
        p4 = self._upsample_add(p5, self.latlayer2(c4))
        p4 = self.toplayer1(p4)
        p3 = self._upsample_add(p4, self.latlayer3(c3))
        p3 = self.toplayer2(p3)
        return p3, p4, p5, p6, p7


def FPN50():
    return FPN(Bottleneck, [1, 1, 1, 1])


# ---------------------------------------------------------------- retinanet.py
class RetinaNet(nn.Module):
    num_anchors = 9

    def __init__(self, num_classes=20, fpn_planes=32):
        super(RetinaNet, self).__init__()
        self.fpn = FPN50()
        self.num_classes = num_classes
        self.fpn_planes = fpn_planes
        self.loc_head = self._make_head(self.num_anchors * 4)
        self.cls_head = self._make_head(self.num_anchors * self.num_classes)

    def forward(self, x):
        fms = self.fpn(x)
        loc_preds = []
        cls_preds = []
        for fm in fms:
            loc_pred = self.loc_head(fm)
            cls_pred = self.cls_head(fm)
            loc_pred = loc_pred.permute(0, 2, 3, 1).contiguous().view(x.size(0), -1, 4)
            cls_pred = cls_pred.permute(0, 2, 3, 1).contiguous().view(x.size(0), -1, self.num_classes)
            loc_preds.append(loc_pred)
            cls_preds.append(cls_pred)
        return torch.cat(loc_preds, 1), torch.cat(cls_preds, 1)

    def _make_head(self, out_planes):
        layers = []
        for _ in range(2):
            layers.append(nn.Conv2d(self.fpn_planes, self.fpn_planes, kernel_size=3, stride=1, padding=1))
            layers.append(nn.ReLU(True))
        layers.append(nn.Conv2d(self.fpn_planes, out_planes, kernel_size=3, stride=1, padding=1))
        return nn.Sequential(*layers)

    def freeze_bn(self):
        '''Freeze BatchNorm layers.'''
        for layer in self.modules():
            if isinstance(layer, nn.BatchNorm2d):
                layer.eval()


def test():
    net = RetinaNet()
    loc_preds, cls_preds = net(Variable(torch.randn(2, 3, 64, 64)))
    print(loc_preds.size())
    print(cls_preds.size())
    loc_grads = Variable(torch.randn(loc_preds.size()))
    cls_grads = Variable(torch.randn(cls_preds.size()))
    loc_preds.backward(loc_grads, retain_graph=True)
    cls_preds.backward(cls_grads)


# ---------------------------------------------------------------- encoder.py
def box_iou(box1, box2):
    lt = torch.max(box1[:, None, :2], box2[:, :2])
    rb = torch.min(box1[:, None, 2:], box2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    area1 = (box1[:, 2] - box1[:, 0]) * (box1[:, 3] - box1[:, 1])
    area2 = (box2[:, 2] - box2[:, 0]) * (box2[:, 3] - box2[:, 1])
    return inter / (area1[:, None] + area2 - inter)


class DataEncoder:
    def __init__(self, input_size=64):
        self.anchor_areas = [8 * 8., 16 * 16., 32 * 32., 64 * 64., 128 * 128.]
        self.aspect_ratios = [1 / 2., 1 / 1., 2 / 1.]
        self.scale_ratios = [1., pow(2, 1 / 3.), pow(2, 2 / 3.)]
        self.anchor_boxes = self._get_anchor_boxes(input_size)

    def _get_anchor_wh(self):
        anchor_wh = []
        for s in self.anchor_areas:
            for ar in self.aspect_ratios:
                h = math.sqrt(s / ar)
                w = ar * h
                for sr in self.scale_ratios:
                    anchor_wh.append([w * sr, h * sr])
        return torch.tensor(anchor_wh).view(len(self.anchor_areas), -1, 2)

    def _get_anchor_boxes(self, input_size):
        anchor_wh = self._get_anchor_wh()
        boxes = []
        for i in range(len(self.anchor_areas)):
            fm = max(1, math.ceil(input_size / pow(2., i + 3)))
            grid = input_size / fm
            ys, xs = torch.meshgrid(torch.arange(fm), torch.arange(fm), indexing='ij')
            xy = (torch.stack([xs, ys], -1).float() + 0.5) * grid
            xy = xy.view(fm, fm, 1, 2).expand(fm, fm, 9, 2)
            wh = anchor_wh[i].view(1, 1, 9, 2).expand(fm, fm, 9, 2)
            box = torch.cat([xy - wh / 2, xy + wh / 2], 3)
            boxes.append(box.reshape(-1, 4))
        return torch.cat(boxes, 0)

    def encode(self, boxes, labels):
        anchors = self.anchor_boxes
        ious = box_iou(anchors, boxes)
        max_ious, max_ids = ious.max(1)
        boxes = boxes[max_ids]
        a_xy = (anchors[:, :2] + anchors[:, 2:]) / 2
        a_wh = anchors[:, 2:] - anchors[:, :2]
        b_xy = (boxes[:, :2] + boxes[:, 2:]) / 2
        b_wh = boxes[:, 2:] - boxes[:, :2]
        loc_targets = torch.cat([(b_xy - a_xy) / a_wh, torch.log(b_wh / a_wh)], 1)
        cls_targets = 1 + labels[max_ids]
        cls_targets[max_ious < 0.5] = 0
        cls_targets[(max_ious > 0.4) & (max_ious < 0.5)] = -1
        return loc_targets, cls_targets


# ---------------------------------------------------------------- loss.py
class FocalLoss(nn.Module):
    def __init__(self, num_classes=20, alpha=0.25, gamma=2):
        super(FocalLoss, self).__init__()
        self.num_classes, self.alpha, self.gamma = num_classes, alpha, gamma

    def focal_loss(self, x, y):
        t = F.one_hot(y, 1 + self.num_classes)[:, 1:].float()
        p = x.sigmoid()
        pt = p * t + (1 - p) * (1 - t)
        w = self.alpha * t + (1 - self.alpha) * (1 - t)
        w = w * (1 - pt).pow(self.gamma)
        return F.binary_cross_entropy_with_logits(x, t, w.detach(), reduction='sum')

    def forward(self, loc_preds, loc_targets, cls_preds, cls_targets):
        pos = cls_targets > 0
        num_pos = pos.sum().clamp(min=1).float()
        loc_loss = F.smooth_l1_loss(loc_preds[pos], loc_targets[pos], reduction='sum')
        pos_neg = cls_targets > -1
        cls_loss = self.focal_loss(cls_preds[pos_neg], cls_targets[pos_neg])
        return (loc_loss + cls_loss) / num_pos


# ---------------------------------------------------------------- train.py
def make_batch(encoder, args):
    imgs, locs, clss = [], [], []
    for _ in range(args.batch_size):
        xy = torch.rand(2) * (args.img_size - 24)
        wh = 12 + torch.rand(2) * 12
        boxes = torch.cat([xy, xy + wh]).view(1, 4)
        labels = torch.randint(0, args.num_classes, (1,))
        imgs.append(torch.randn(3, args.img_size, args.img_size))
        loc_t, cls_t = encoder.encode(boxes, labels)
        locs.append(loc_t)
        clss.append(cls_t)
    return torch.stack(imgs), torch.stack(locs), torch.stack(clss)


def train(args):
    net = RetinaNet(num_classes=args.num_classes)
    encoder = DataEncoder(args.img_size)
    criterion = FocalLoss(num_classes=args.num_classes)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    net.train()
    net.freeze_bn()
    for step in range(args.steps):
        inputs, loc_targets, cls_targets = make_batch(encoder, args)
        optimizer.zero_grad()
        loc_preds, cls_preds = net(inputs)
        loss = criterion(loc_preds, loc_targets, cls_preds, cls_targets)
        loss.backward()
        optimizer.step()
        print('step %d | train_loss: %.3f' % (step, loss.item()))


if __name__ == '__main__':
    test()
    train(SimpleNamespace(num_classes=20, img_size=64, batch_size=2, lr=1e-3, steps=3))
