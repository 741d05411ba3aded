# expect: clean
# source: https://github.com/unslothai/unsloth/issues/3828
"""GRPO-style loop on a tiny causal LM whose blocks use an offloaded
gradient-checkpointing helper that keeps one reusable host buffer for the saved
hidden states. Rollouts are sampled with fast generation, the policy is updated,
and the periodic evaluation pass scores a held-out prompt batch."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, DIM = 40, 32


class Offloader:
    """Saves block inputs to a reusable buffer (unsloth-style offloaded checkpointing)."""
    def __init__(self):
        self.buffer = None

    def save(self, h):
        if self.buffer is None or self.buffer.shape != h.shape:
            self.buffer = torch.empty_like(h)
        self.buffer.copy_(h.detach())
        return h


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(nn.Linear(DIM, DIM) for _ in range(2))
        self.head = nn.Linear(DIM, VOCAB)
        self.offload = Offloader()

    def forward(self, ids):
        h = self.emb(ids)
        for blk in self.blocks:
            h = h + torch.tanh(blk(self.offload.save(h)))
        return self.head(h)


@torch.no_grad()
def generate(model, prompts, n_new=6):
    ids = prompts
    for _ in range(n_new):
        nxt = torch.multinomial(F.softmax(model(ids)[:, -1], -1), 1)
        ids = torch.cat([ids, nxt], 1)
    return ids


def reward_fn(ids):
    return (ids[:, -6:] % 2 == 0).float().mean(1)


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
prompts = torch.randint(0, VOCAB, (8, 5))
eval_prompts = torch.randint(0, VOCAB, (8, 5))

for step in range(3):
    seqs = generate(model, prompts).clone()
    r = reward_fn(seqs)
    adv = (r - r.mean()) / (r.std() + 1e-4)
    logp = F.log_softmax(model(seqs[:, :-1]), -1).gather(-1, seqs[:, 1:, None]).squeeze(-1)
    loss = -(adv[:, None] * logp[:, -6:]).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

    with torch.no_grad():  # trainer.evaluate()
        eval_logits = model(eval_prompts)
        print("step %d  reward %.3f  eval nll %.4f" % (
            step, r.mean().item(), F.cross_entropy(eval_logits[:, :-1].reshape(-1, VOCAB),
                                                   eval_prompts[:, 1:].reshape(-1)).item()))
