# expect: clean
# source: https://github.com/ilia10000/dataset-distillation/issues/3
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

num_classes = 4
distill_steps = 2
distill_lr = 0.05

# learnable distilled images and learnable (soft) labels
distilled_data = torch.randn(num_classes, 16, requires_grad=True)
distilled_label_logits = torch.randn(num_classes, num_classes, requires_grad=True)

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, num_classes))
params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]


def forward(params, x):
    w1, b1, w2, b2 = params
    h = F.relu(F.linear(x, w1, b1))
    return F.linear(h, w2, b2)


def soft_cross_entropy(logits, soft_targets):
    return -(soft_targets * F.log_softmax(logits, dim=1)).sum(1).mean()


# unroll a few steps of training on the distilled set
for step in range(distill_steps):
    soft_targets = F.softmax(distilled_label_logits, dim=1)
    out = forward(params, distilled_data)
    loss = soft_cross_entropy(out, soft_targets)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    params = [p - distill_lr * g for p, g in zip(params, grads)]

# evaluate on "real" data
real_x = torch.randn(32, 16)
real_y = torch.randint(0, num_classes, (32,))
eval_loss = F.cross_entropy(forward(params, real_x), real_y)

# hypergradients for data and labels
grad_data, grad_labels = torch.autograd.grad(eval_loss, (distilled_data, distilled_label_logits))

with torch.no_grad():
    distilled_data -= 0.1 * grad_data
    distilled_label_logits -= 0.1 * grad_labels
print("eval loss", eval_loss.item())
