# expect: clean
# source: https://github.com/BorealisAI/advertorch/issues/49
"""One-step FGSM attack (advertorch GradientSignAttack style) on a small MNIST-like
classifier, followed by computing the input gradient of the adversarial batch
to compare gradient norms of clean and adversarial inputs."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(8 * 14 * 14, 10))
model.eval()


def batch_multiply(float_or_vector, tensor):
    return float_or_vector * tensor


def clamp(x, lo, hi):
    return torch.max(torch.min(x, torch.full_like(x, hi)), torch.full_like(x, lo))


def fgsm_perturb(predict, x, y, eps=0.3, clip_min=0.0, clip_max=1.0, targeted=False):
    xadv = x.requires_grad_()
    outputs = predict(xadv)
    loss = F.cross_entropy(outputs, y, reduction="sum")
    if targeted:
        loss = -loss
    loss.backward()
    grad_sign = xadv.grad.detach().sign()
    xadv = xadv + batch_multiply(eps, grad_sign)
    xadv = clamp(xadv, clip_min, clip_max)
    return xadv.detach()


def input_grad(predict, x, y):
    x.requires_grad = True
    loss = F.cross_entropy(predict(x), y)
    grad, = torch.autograd.grad(loss, x)
    return grad


x = torch.rand(16, 1, 28, 28)
y = torch.randint(0, 10, (16,))

fgsm_tensor = fgsm_perturb(model, x.clone(), y, eps=0.1)
clean_grad = input_grad(model, x.clone(), y)
adv_grad = input_grad(model, fgsm_tensor, y)
print("clean grad norm:", clean_grad.norm().item())
print("adv grad norm:", adv_grad.norm().item())
with torch.no_grad():
    acc_clean = (model(x).argmax(1) == y).float().mean().item()
    acc_adv = (model(fgsm_tensor).argmax(1) == y).float().mean().item()
print(f"acc clean {acc_clean:.3f} adv {acc_adv:.3f}")
