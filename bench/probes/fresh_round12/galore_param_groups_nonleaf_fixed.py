# expect: clean
# source: https://github.com/jiaweizzhao/GaLore/issues/60
"""Seq2seq fine-tuning with GaLore param groups built the way the HF Trainer
does for optim_target_modules='all-linear': every nn.Linear weight goes into
the low-rank-projection group, everything else into the plain group."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm


class TinySeq2Seq(nn.Module):
    def __init__(self, vocab=40, d=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.enc = nn.GRU(d, d, batch_first=True)
        self.enc_proj = weight_norm(nn.Linear(d, d))
        self.dec = nn.GRU(d, d, batch_first=True)
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, src, tgt_in):
        _, h = self.enc(self.embed(src))
        h = torch.tanh(self.enc_proj(h))
        out, _ = self.dec(self.embed(tgt_in), h)
        return self.lm_head(out)


torch.manual_seed(0)
model = TinySeq2Seq()
galore_optim_kwargs = {"rank": 8, "update_proj_gap": 200, "scale": 0.25, "proj_type": "std"}

galore_params = []
for module_name, module in model.named_modules():
    if not isinstance(module, nn.Linear):
        continue
    if parametrize.is_parametrized(module, "weight"):
        continue
    galore_params.append(module.weight)

id_galore_params = [id(p) for p in galore_params]
non_galore_params = [p for p in model.parameters() if id(p) not in id_galore_params]
param_groups = [
    {"params": non_galore_params},
    {"params": galore_params, **galore_optim_kwargs},
]
optimizer = torch.optim.AdamW(param_groups, lr=5e-5)

for step in range(3):
    src = torch.randint(0, 40, (4, 10))
    tgt = torch.randint(0, 40, (4, 8))
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss={loss.item():.4f}")
