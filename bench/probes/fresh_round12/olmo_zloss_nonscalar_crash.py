# expect: nonscalar_backward
# source: https://github.com/allenai/OLMo/pull/523
"""Small causal-LM training step using OLMo's cross_entropy_loss helper with
the auxiliary z-loss (softmax_auxiliary_loss) switched on."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def cross_entropy_loss(logits, labels, ignore_index: int = -100, reduction: str = "mean",
                       compute_z_loss: bool = False):
    loss = F.cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction)

    if not compute_z_loss:
        return loss, None

    z_squared = logits.logsumexp(-1).pow(2)
    if reduction == "mean":
        z_squared = z_squared / (labels != ignore_index).float().mean()
    elif reduction == "sum":
        z_squared = (z_squared * (labels != ignore_index)).sum()

    z_loss = 1e-4 * z_squared

    return loss, z_loss


class TinyLM(nn.Module):
    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.block = nn.TransformerEncoderLayer(d, 4, 64, batch_first=True)
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, input_ids):
        mask = nn.Transformer.generate_square_subsequent_mask(input_ids.size(1))
        return self.lm_head(self.block(self.emb(input_ids), src_mask=mask))


torch.manual_seed(0)
model = TinyLM()
optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
batch = {"input_ids": torch.randint(0, 50, (4, 16)), "attention_mask": torch.ones(4, 16)}
batch["attention_mask"][:, -3:] = 0

for step in range(3):
    optim.zero_grad(set_to_none=True)
    logits = model(batch["input_ids"])
    logits_for_loss = logits[..., :-1, :].contiguous().view(-1, logits.size(-1))
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0.0, -100)[..., 1:].contiguous()
    ce_loss, z_loss = cross_entropy_loss(logits_for_loss, labels.view(-1), compute_z_loss=True)
    loss = ce_loss + z_loss
    loss.backward()  # raises
    optim.step()
    print(f"step {step}: CE={ce_loss.item():.4f}")
