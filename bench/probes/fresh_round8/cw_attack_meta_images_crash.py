# expect: nonleaf_optimizer
# source: https://github.com/cleverhans-lab/cleverhans/issues/1239
import torch
import torch.nn as nn

torch.manual_seed(0)
INF = float("inf")


class MetaImage(torch.Tensor):
    """Image tensor that carries acquisition metadata through the data pipeline."""
    meta = {}


def load_batch(n=4):
    x = torch.rand(n, 1, 16, 16).as_subclass(MetaImage)
    x.meta = {"spacing": (0.8, 0.8), "modality": "CT"}
    return x, torch.randint(0, 3, (n,))


def carlini_wagner_l2(model_fn, x, n_classes, y=None, targeted=False, lr=5e-3, confidence=0,
                      clip_min=0.0, clip_max=1.0, initial_const=1e-2, binary_search_steps=2,
                      max_iterations=10):
    if y is None:
        y = torch.argmax(model_fn(x), 1)
    const = x.new_ones((len(x), 1)) * initial_const
    x = torch.clamp(x, clip_min, clip_max)
    ox = x.clone().detach()  # save the original x
    o_bestattack = x.clone().detach()
    o_bestl2 = [INF] * len(x)
    # Map images into the tanh-space
    x = (x - clip_min) / (clip_max - clip_min)
    x = torch.clamp(x, 0, 1) * 2 - 1
    x = torch.arctanh(x * 0.999999)
    # Prepare some variables
    modifier = torch.zeros_like(x, requires_grad=True)
    y_onehot = torch.nn.functional.one_hot(y, n_classes).to(torch.float)

    def f_fn(real, other):
        return torch.clamp(real - other + confidence, min=0.0)

    def l2dist_fn(a, b):
        return torch.pow(a - b, 2).sum(list(range(len(a.size())))[1:])

    optimizer = torch.optim.Adam([modifier], lr=lr)  # raises
    for outer_step in range(binary_search_steps):
        for i in range(max_iterations):
            new_x = (torch.tanh(modifier + x) + 1) / 2
            new_x = new_x * (clip_max - clip_min) + clip_min
            logits = model_fn(new_x)
            real = torch.sum(y_onehot * logits, 1)
            other, _ = torch.max((1 - y_onehot) * logits - y_onehot * 1e4, 1)
            optimizer.zero_grad()
            l2 = l2dist_fn(new_x, ox)
            loss = (const * f_fn(real, other) + l2).sum()
            loss.backward()
            optimizer.step()
            for n, (l2_n, pred_n) in enumerate(zip(l2, logits.argmax(1))):
                if l2_n < o_bestl2[n] and pred_n != y[n]:
                    o_bestl2[n] = l2_n.item()
                    o_bestattack[n] = new_x[n].detach()
        const = const * 10
    return o_bestattack


model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                      nn.Flatten(), nn.Linear(128, 3))
model.eval()
images, labels = load_batch()
adv = carlini_wagner_l2(model, images, n_classes=3, y=labels, lr=0.1)
print("mean L2:", (adv - images).flatten(1).norm(dim=1).mean().item())
