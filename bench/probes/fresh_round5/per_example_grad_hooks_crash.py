# expect: nonscalar_backward
# source: https://github.com/cybertronai/autograd-hacks/issues/7
# Per-example gradients with forward/backward hooks (autograd-hacks style).
# The critic outputs a vector per sample, but I only need per-example grads
# of the first output (the value estimate).
import torch
import torch.nn as nn

torch.manual_seed(0)

_hooks = []


def add_hooks(model):
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            _hooks.append(layer.register_forward_hook(_capture_activations))
            _hooks.append(layer.register_full_backward_hook(_capture_backprops))


def _capture_activations(layer, inputs, output):
    layer.activations = inputs[0].detach()


def _capture_backprops(layer, grad_input, grad_output):
    layer.backprops = grad_output[0].detach()


def compute_grad1(model):
    """Store per-example gradients in param.grad1 (loss_type='sum')."""
    for layer in model.modules():
        if not isinstance(layer, nn.Linear):
            continue
        A, B = layer.activations, layer.backprops
        layer.weight.grad1 = torch.einsum('ni,nj->nij', B, A)
        if layer.bias is not None:
            layer.bias.grad1 = B


model = nn.Sequential(
    nn.Linear(8, 16), nn.Tanh(),
    nn.Linear(16, 16), nn.Tanh(),
    nn.Linear(16, 3),  # value, log-std, entropy bonus
)
data = torch.randn(32, 8)

add_hooks(model)
output = model(data)
output.backward()  # raises
compute_grad1(model)

# sanity check against a per-sample loop
for i in range(3):
    model.zero_grad()
    model(data[i:i + 1])[0, 0].backward()
    ref = model[0].weight.grad
    print(i, torch.allclose(model[0].weight.grad1[i], ref, atol=1e-6))

norms = torch.stack([p.grad1.flatten(1).norm(dim=1) for p in model.parameters()]).sum(0)
print("per-example grad norm (mean):", norms.mean().item())
