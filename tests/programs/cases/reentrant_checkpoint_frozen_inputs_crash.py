# expect: no_grad_fn
# shape: blocks run through a reentrant checkpoint (`functools.partial(checkpoint, use_reentrant=True)`, as transformers binds it) while the embeddings are frozen for adapter tuning: no input of the checkpoint requires grad, so its output has no graph even though the blocks train
import functools

import torch
import torch.nn as nn
import torch.utils.checkpoint


class TinyLM(nn.Module):
    def __init__(self, vocab=32, dim=16, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.GELU()) for _ in range(n_layers))
        self.head = nn.Linear(dim, vocab)
        self.gradient_checkpointing = False

    def gradient_checkpointing_enable(self):
        self._checkpoint = functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=True)
        self.gradient_checkpointing = True

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = self._checkpoint(layer, h) if self.gradient_checkpointing else layer(h)
        return self.head(h)


torch.manual_seed(0)
model = TinyLM()
model.embed.requires_grad_(False)
model.head.requires_grad_(False)
model.gradient_checkpointing_enable()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
ids = torch.randint(0, 32, (2, 8))
logits = model(ids)
loss = nn.functional.cross_entropy(logits.reshape(-1, 32), ids.reshape(-1))
loss.backward()  # raises
opt.step()
