# expect: inference_tensor
# source: https://github.com/unslothai/unsloth-zoo/pull/805
# GRPO step with "smart" gradient checkpointing that offloads activations to persistent buffers.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
CPU_BUFFERS = {}


class OffloadedGradientCheckpointer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, forward_function, hidden_states, layer_idx):
        key = (layer_idx, tuple(hidden_states.shape))
        if key not in CPU_BUFFERS:
            CPU_BUFFERS[key] = torch.empty(hidden_states.shape, dtype=hidden_states.dtype, device="cpu")
        x = CPU_BUFFERS[key]
        x.copy_(hidden_states, non_blocking=True)  # raises
        with torch.no_grad():
            output = forward_function(hidden_states)
        ctx.save_for_backward(x)
        ctx.forward_function = forward_function
        return output

    @staticmethod
    def backward(ctx, dY):
        (x,) = ctx.saved_tensors
        hidden_states = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            output = ctx.forward_function(hidden_states)
        torch.autograd.backward(output, dY)
        return None, hidden_states.grad, None


class Policy(nn.Module):
    def __init__(self, vocab=64, dim=32, n_layers=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.GELU()) for _ in range(n_layers))
        self.lm_head = nn.Linear(dim, vocab)
        self.gradient_checkpointing = True

    def forward(self, ids):
        h = self.embed(ids)
        for i, layer in enumerate(self.layers):
            if self.gradient_checkpointing and self.training:
                h = h + OffloadedGradientCheckpointer.apply(layer, h, i)
            else:
                h = h + layer(h)
        return self.lm_head(h)


def per_token_logps(model, ids):
    logits = model(ids)[:, :-1]
    return torch.gather(logits.log_softmax(-1), 2, ids[:, 1:, None]).squeeze(-1)


model = Policy().train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
completions = torch.randint(0, 64, (4, 10))
advantages = torch.randn(4)
beta = 0.04

for step in range(3):
    with torch.inference_mode():
        ref_logps = per_token_logps(model, completions)
    ref_logps = ref_logps.clone()
    logps = per_token_logps(model, completions)
    kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
    loss = -(torch.exp(logps - logps.detach()) * advantages[:, None] - beta * kl).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(step, loss.item())
