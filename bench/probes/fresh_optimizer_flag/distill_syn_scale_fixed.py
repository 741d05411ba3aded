# expect: clean
# source: https://github.com/pytorch/pytorch/issues/140469
import argparse
import numpy as np
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument('--dlipc', type=int, default=10)
parser.add_argument('--dllr_img', type=float, default=1.0)
parser.add_argument('--dlIteration', type=int, default=5)
parser.add_argument('--dlbatch_real', type=int, default=32)
parser.add_argument('--dldevice', type=str, default='cpu')
args = parser.parse_args()

torch.manual_seed(0)
np.random.seed(0)
num_classes, channel, im_size = 4, 3, (16, 16)

# stand-in for the real training set, grouped by class
images_all = torch.randn(num_classes * 50, channel, im_size[0], im_size[1])
labels_all = torch.arange(num_classes).repeat_interleave(50)
indices_class = [torch.where(labels_all == c)[0].tolist() for c in range(num_classes)]

def get_images(c, n):
    idx_shuffle = np.random.permutation(indices_class[c])[:n]
    return images_all[idx_shuffle]

embed = nn.Sequential(nn.Conv2d(channel, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
                      nn.Flatten(), nn.Linear(16 * 8 * 8, 64))
for p in embed.parameters():
    p.requires_grad = False

image_syn = (torch.randn(size=(num_classes*args.dlipc, channel, im_size[0], im_size[1]), dtype=torch.float, device=args.dldevice) * 0.01).requires_grad_(True)
label_syn = torch.tensor(np.array([np.ones(args.dlipc)*i for i in range(num_classes)]), dtype=torch.long, requires_grad=False, device=args.dldevice).view(-1)

optimizer_img = torch.optim.SGD([image_syn, ], lr=args.dllr_img, momentum=0.5)
optimizer_img.zero_grad()
print('%s training begins' % 'DM')

for it in range(args.dlIteration + 1):
    loss = torch.tensor(0.0)
    for c in range(num_classes):
        img_real = get_images(c, args.dlbatch_real)
        img_syn = image_syn[c*args.dlipc:(c+1)*args.dlipc]
        output_real = embed(img_real).detach()
        output_syn = embed(img_syn)
        loss += torch.sum((torch.mean(output_real, dim=0) - torch.mean(output_syn, dim=0))**2)

    optimizer_img.zero_grad()
    loss.backward()
    optimizer_img.step()
    print('iter = %04d, loss = %.4f' % (it, loss.item() / num_classes))
