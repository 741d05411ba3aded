# expect: clean
# source: https://github.com/hpcaitech/ColossalAI/pull/711
"""Activation checkpointing with optional activation offload, driving a small GPT.

The checkpoint function keeps the RNG state of the forward pass so that the
recomputation in backward sees the same dropout masks; with activation offload
the saved inputs are moved to host memory and brought back for the backward.
"""
import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import check_backward_validity, detach_variable


@dataclass
class Config:
    vocab_size: int = 128
    seq_len: int = 16
    hidden: int = 48
    heads: int = 4
    layers: int = 3
    dropout: float = 0.1
    checkpoint: bool = True
    activation_offload: bool = True
    batch_size: int = 8
    steps: int = 6
    lr: float = 3e-3
    log_interval: int = 2


def get_current_device():
    return torch.device('cuda', torch.cuda.current_device()) if torch.cuda.is_available() else torch.device('cpu')


def copy_to_device(obj, device):
    if torch.is_tensor(obj):
        # Notice:
        # When in no_grad context, requires_gard is False after movement
        ret = obj.to(device).detach()
        ret.requires_grad = obj.requires_grad
        return ret
    elif isinstance(obj, list):
        return [copy_to_device(i, device) for i in obj]
    elif isinstance(obj, tuple):
        return tuple([copy_to_device(v, device) for v in obj])
    elif isinstance(obj, dict):
        return {k: copy_to_device(v, device) for k, v in obj.items()}
    else:
        return obj


class CheckpointFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, run_function, activation_offload=False, *args):
        check_backward_validity(args)
        ctx.run_function = run_function
        ctx.activation_offload = activation_offload
        ctx.device = get_current_device()
        # preserve rng states
        ctx.fwd_cpu_rng_state = torch.get_rng_state()
        if activation_offload:
            inputs_cuda = copy_to_device(args, ctx.device)
        else:
            inputs_cuda = args
        with torch.no_grad():
            outputs = run_function(*inputs_cuda)
        # Save non-tensor inputs in ctx, keep a placeholder None for tensors
        ctx.inputs, ctx.tensor_indices, tensor_inputs = [], [], []
        for i, arg in enumerate(args):
            if torch.is_tensor(arg):
                tensor_inputs.append(copy_to_device(arg, 'cpu') if activation_offload else arg)
                ctx.tensor_indices.append(i)
                ctx.inputs.append(None)
            else:
                ctx.inputs.append(arg)
        if activation_offload:
            ctx.tensor_inputs = tensor_inputs
        else:
            ctx.save_for_backward(*tensor_inputs)
        return outputs

    @staticmethod
    def backward(ctx, *args):
        inputs = list(ctx.inputs)
        tensors = ctx.tensor_inputs if ctx.activation_offload else ctx.saved_tensors
        bwd_cpu_rng_state = torch.get_rng_state()
        torch.set_rng_state(ctx.fwd_cpu_rng_state)
        if ctx.activation_offload:
            tensors = copy_to_device(tensors, ctx.device)
        for i, idx in enumerate(ctx.tensor_indices):
            inputs[idx] = tensors[i]
        detached_inputs = detach_variable(tuple(inputs))
        with torch.enable_grad():
            outputs = ctx.run_function(*detached_inputs)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        torch.set_rng_state(bwd_cpu_rng_state)
        outputs_with_grad, args_with_grad = [], []
        for i in range(len(outputs)):
            if torch.is_tensor(outputs[i]) and outputs[i].requires_grad:
                outputs_with_grad.append(outputs[i])
                args_with_grad.append(args[i])
        if len(outputs_with_grad) == 0:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        torch.autograd.backward(outputs_with_grad, args_with_grad)
        grads = tuple(inp.grad if isinstance(inp, torch.Tensor) else None for inp in detached_inputs)
        return (None, None) + grads


def checkpoint(function, activation_offload, *args):
    return CheckpointFunction.apply(function, activation_offload, *args)


class GPTBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.ln1, self.ln2 = nn.LayerNorm(cfg.hidden), nn.LayerNorm(cfg.hidden)
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(),
                                 nn.Linear(4 * cfg.hidden, cfg.hidden), nn.Dropout(cfg.dropout))
        self.drop = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.seq_len, cfg.seq_len)).bool()
        self.register_buffer('mask', mask)

    def _forward(self, x):
        b, t, h = x.shape
        nh = self.cfg.heads
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = [z.view(b, t, nh, h // nh).transpose(1, 2) for z in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // nh)
        att = self.drop(att.masked_fill(~self.mask[:t, :t], float('-inf')).softmax(-1))
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, h))
        return x + self.mlp(self.ln2(x))

    def forward(self, x):
        if self.cfg.checkpoint and self.training:
            return checkpoint(self._forward, self.cfg.activation_offload, x)
        return self._forward(x)


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.pos = nn.Parameter(torch.zeros(1, cfg.seq_len, cfg.hidden))
        self.blocks = nn.ModuleList([GPTBlock(cfg) for _ in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab_size, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, :idx.size(1)]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class ThroughputHook:
    def __init__(self):
        self.tokens, self.start = 0, time.time()

    def after_step(self, batch):
        self.tokens += batch.numel()

    def throughput(self):
        return self.tokens / max(time.time() - self.start, 1e-6)


def train(cfg):
    torch.manual_seed(1024)
    device = get_current_device()
    model = GPT(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    hook = ThroughputHook()
    data = torch.randint(0, cfg.vocab_size, (cfg.batch_size * cfg.steps, cfg.seq_len + 1))
    model.train()
    for step in range(cfg.steps):
        batch = data[step * cfg.batch_size:(step + 1) * cfg.batch_size].to(device)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        hook.after_step(inputs)
        if step % cfg.log_interval == 0:
            print(f"step {step}: loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e} "
                  f"tokens/s {hook.throughput():.0f}")
    return model


if __name__ == '__main__':
    train(Config())
