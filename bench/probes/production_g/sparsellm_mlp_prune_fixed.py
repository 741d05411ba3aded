# expect: clean
# source: https://github.com/BaiTheBest/SparseLLM/issues/13
"""Global-to-local pruning of the MLP blocks of a small decoder LM.

SparseLLM-style alternating optimisation: the gated MLP
    Y = W_down (silu(W_gate X) * (W_up X))
is split with auxiliary variables s (gate pre-activation), z (up projection)
and p (hidden activation).  Weights are refit under a fixed unstructured mask
by least squares, p and z have closed-form updates, and s is updated with a
few mini-batch gradient steps.  A tiny LM is first trained on a synthetic
successor-table corpus so that there is something to preserve.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

args = SimpleNamespace(
    vocab=48, d_model=32, d_ff=64, n_layers=2, seq_len=24,
    train_steps=40, lr=3e-3, calib_seqs=6, sparsity=0.5,
    admm_epochs=2, alpha=5.0, beta=5.0, gamma=5.0,
    s_lr=0.02, s_batch=32, seed=17,
)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class GatedMLP(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, d_ff, bias=False)
        self.up_proj = nn.Linear(d, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(a.d_model), RMSNorm(a.d_model)
        self.attn = nn.MultiheadAttention(a.d_model, 4, batch_first=True)
        self.mlp = GatedMLP(a.d_model, a.d_ff)

    def forward(self, x, causal_mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=causal_mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.d_model)
        self.pos = nn.Parameter(torch.randn(a.seq_len, a.d_model) * 0.02)
        self.layers = nn.ModuleList([DecoderLayer(a) for _ in range(a.n_layers)])
        self.norm = RMSNorm(a.d_model)
        self.lm_head = nn.Linear(a.d_model, a.vocab, bias=False)

    def forward(self, ids):
        n = ids.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        x = self.embed(ids) + self.pos[:n]
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.norm(x))


TRANSITION = torch.randperm(48, generator=torch.Generator().manual_seed(0))


def synthetic_batch(a, n, gen):
    """Token streams from a fixed successor table with occasional random resets."""
    ids = torch.empty(n, a.seq_len, dtype=torch.long)
    ids[:, 0] = torch.randint(0, a.vocab, (n,), generator=gen)
    for t in range(1, a.seq_len):
        reset = torch.rand(n, generator=gen) < 0.1
        rand_tok = torch.randint(0, a.vocab, (n,), generator=gen)
        ids[:, t] = torch.where(reset, rand_tok, TRANSITION[ids[:, t - 1]])
    return ids


def lm_loss(model, ids):
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def capture_mlp_io(model, ids):
    store, handles = {}, []
    for i, layer in enumerate(model.layers):
        def hook(mod, inp, out, i=i):
            store[i] = (inp[0].detach().reshape(-1, inp[0].shape[-1]).T,
                        out.detach().reshape(-1, out.shape[-1]).T)
        handles.append(layer.mlp.register_forward_hook(hook))
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    return store


def wanda_mask(W, X, sparsity):
    score = W.abs() * X.norm(dim=1)[None, :]
    k = int(W.shape[1] * sparsity)
    idx = torch.topk(score, k, dim=1, largest=False).indices
    mask = torch.ones_like(W, dtype=torch.bool)
    mask.scatter_(1, idx, False)
    return mask


def masked_lstsq(target, inputs, mask, ridge=1e-3):
    """Row-wise refit of W in target ~ W @ inputs restricted to mask support."""
    W = torch.zeros(mask.shape)
    for r in range(mask.shape[0]):
        cols = mask[r].nonzero().squeeze(-1)
        A = inputs[cols]
        G = A @ A.T + ridge * torch.eye(len(cols))
        W[r, cols] = torch.linalg.solve(G, A @ target[r])
    return W


class SparseLLMPruner:
    def __init__(self, model, a):
        self.model, self.a = model, a

    def prune_mlp(self, mlp, X, Y):
        a = self.a
        W_gate = mlp.gate_proj.weight.detach().clone()
        W_up = mlp.up_proj.weight.detach().clone()
        W_down = mlp.down_proj.weight.detach().clone()
        m_gate, m_up = wanda_mask(W_gate, X, a.sparsity), wanda_mask(W_up, X, a.sparsity)
        s = (W_gate @ X).to(torch.float16)
        z = W_up @ X
        p = F.silu(s.float()) * z
        m_down = wanda_mask(W_down, p, a.sparsity)
        for epoch in range(a.admm_epochs):
            W_down = masked_lstsq(Y, p, m_down)
            eye = torch.eye(W_down.shape[1])
            p = torch.linalg.solve(a.alpha * W_down.T @ W_down + a.beta * eye,
                                   a.alpha * W_down.T @ Y + a.beta * F.silu(s.float()) * z)
            W_gate = masked_lstsq(s.float(), X, m_gate)
            W_up = masked_lstsq(z, X, m_up)
            act = F.silu(s.float())
            z = (a.beta * act * p + a.gamma * (W_up @ X)) / (a.beta * act ** 2 + a.gamma)
            w = W_gate
            for k in range(0, s.size(-1), a.s_batch):
                chunk = slice(k, k + a.s_batch)
                X_batch = X[:, chunk]
                z_batch, p_batch = z[:, chunk], p[:, chunk]
                s_batch = s[:, chunk].to(dtype=torch.float32).requires_grad_(True)
                with torch.enable_grad():
                    loss_s = a.alpha * torch.norm(s_batch - w @ X_batch) ** 2
                    loss_s = loss_s + a.gamma * torch.norm(p_batch - F.silu(s_batch) * z_batch) ** 2
                loss_s.backward()
                s_batch = s_batch - a.s_lr * s_batch.grad
                s[:, chunk] = s_batch.detach().to(dtype=torch.float16)
        mlp.gate_proj.weight.data.copy_(W_gate * m_gate)
        mlp.up_proj.weight.data.copy_(W_up * m_up)
        mlp.down_proj.weight.data.copy_(W_down * m_down)
        recon = F.mse_loss(mlp(X.T), Y.T).item()
        return recon

    def run(self, calib_ids):
        io = capture_mlp_io(self.model, calib_ids)
        report = {}
        for i, layer in enumerate(self.model.layers):
            X, Y = io[i]
            report[i] = self.prune_mlp(layer.mlp, X, Y)
            io = capture_mlp_io(self.model, calib_ids)
        return report


def main(a):
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    model = TinyLM(a)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    for step in range(a.train_steps):
        loss = lm_loss(model, synthetic_batch(a, 16, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    held_out = synthetic_batch(a, 16, gen)
    with torch.no_grad():
        dense_ppl = math.exp(lm_loss(model, held_out).item())
    pruner = SparseLLMPruner(model, a)
    report = pruner.run(synthetic_batch(a, a.calib_seqs, gen))
    with torch.no_grad():
        sparse_ppl = math.exp(lm_loss(model, held_out).item())
    density = np.mean([(l.mlp.gate_proj.weight != 0).float().mean().item() for l in model.layers])
    print("mlp reconstruction mse:", {k: round(v, 5) for k, v in report.items()})
    print(f"dense ppl {dense_ppl:.2f} -> pruned ppl {sparse_ppl:.2f} (gate density {density:.2f})")


if __name__ == "__main__":
    main(args)
