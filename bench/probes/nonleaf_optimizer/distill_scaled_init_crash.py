# expect: nonleaf_optimizer
# source: https://github.com/pytorch/pytorch/issues/140469
import torch
import torch.nn as nn

torch.manual_seed(0)

num_classes = 4
dlipc = 2                      # synthetic images per class
channel, im_size = 3, (16, 16)
dllr_img = 1.0
dldevice = "cpu"
iterations = 5

# stand-in for the real training set
images_all = torch.randn(num_classes * 32, channel, im_size[0], im_size[1])
labels_all = torch.arange(num_classes).repeat_interleave(32)
indices_class = [torch.where(labels_all == c)[0] for c in range(num_classes)]


def get_images(c, n):
    idx = indices_class[c][torch.randperm(len(indices_class[c]))[:n]]
    return images_all[idx]


def build_embedder():
    return nn.Sequential(
        nn.Conv2d(channel, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


image_syn = torch.randn(size=(num_classes * dlipc, channel, im_size[0], im_size[1]), dtype=torch.float, requires_grad=True, device=dldevice) * 0.01
label_syn = torch.arange(num_classes).repeat_interleave(dlipc)

optimizer_img = torch.optim.SGD([image_syn, ], lr=dllr_img, momentum=0.5)  # raises

for it in range(iterations):
    net = build_embedder().to(dldevice)
    for p in net.parameters():
        p.requires_grad_(False)

    loss = torch.tensor(0.0, device=dldevice)
    for c in range(num_classes):
        img_real = get_images(c, 16)
        img_syn = image_syn[c * dlipc:(c + 1) * dlipc]
        output_real = net(img_real).detach()
        output_syn = net(img_syn)
        loss = loss + torch.sum((output_real.mean(0) - output_syn.mean(0)) ** 2)

    optimizer_img.zero_grad()
    loss.backward()
    optimizer_img.step()
    print(f"iter {it:02d}  distribution-matching loss {loss.item():.6f}")

print("synthetic set:", tuple(image_syn.shape), "labels:", label_syn.tolist())
