# expect: clean
# source: https://github.com/guoyang9/UnifER/issues/3
"""Knowledge-based VQA model (UnifER-like: retriever scores + reader answer
head) whose forward returns its own losses; the batch is split over two
replicas the way nn.DataParallel scatters/gathers (emulated on CPU)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class UnifER(nn.Module):
    def __init__(self, dim=32, n_answers=10):
        super().__init__()
        self.q_enc = nn.Linear(dim, dim)
        self.k_enc = nn.Linear(dim, dim)
        self.reader = nn.Linear(2 * dim, n_answers)

    def forward(self, q, knowledge, answer):
        qh = torch.tanh(self.q_enc(q))                        # [B, D]
        kh = torch.tanh(self.k_enc(knowledge))                # [B, K, D]
        retr = torch.einsum("bd,bkd->bk", qh, kh)             # [B, K]
        ctx = (retr.softmax(-1).unsqueeze(-1) * kh).sum(1)    # [B, D]
        logits = self.reader(torch.cat([qh, ctx], -1))
        loss_vqa = F.cross_entropy(logits, answer)
        loss_retr = -retr.log_softmax(-1)[:, 0].mean()        # first fact is gold
        return loss_vqa, loss_retr


def data_parallel(module, inputs, n_replicas=2):
    """scatter along dim 0, run each chunk, gather scalar outputs into a vector"""
    chunks = [torch.chunk(t, n_replicas) for t in inputs]
    outs = [module(*[c[i] for c in chunks]) for i in range(n_replicas)]
    return tuple(torch.stack([o[j] for o in outs]) for j in range(len(outs[0])))


model = UnifER()
optim = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    q = torch.randn(8, 32)
    knowledge = torch.randn(8, 5, 32)
    answer = torch.randint(0, 10, (8,))
    loss_vqa, loss_retr = data_parallel(model, (q, knowledge, answer))
    print(loss_vqa, loss_retr)
    loss = loss_vqa.mean() + 0.5 * loss_retr.mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    print(f"step {step} loss {loss.detach()}")
