# expect: clean
# source: https://github.com/archinetai/smart-pytorch/issues/5
"""Fine-tuning a small text classifier with SMART adversarial smoothness regularisation."""
from dataclasses import dataclass
from itertools import count

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainConfig:
    vocab_size: int = 200
    max_len: int = 16
    hidden: int = 32
    n_heads: int = 4
    n_layers: int = 1
    n_classes: int = 3
    batch_size: int = 8
    steps: int = 3
    lr: float = 1e-3
    smart_weight: float = 0.02
    seed: int = 0


def kl_loss(input, target, reduction="batchmean"):
    return F.kl_div(F.log_softmax(input, dim=-1), F.softmax(target, dim=-1), reduction=reduction)


def sym_kl_loss(input, target, reduction="sum", alpha=1.0):
    return alpha * F.kl_div(F.log_softmax(input, dim=-1), F.softmax(target.detach(), dim=-1), reduction=reduction) + \
        F.kl_div(F.log_softmax(target, dim=-1), F.softmax(input.detach(), dim=-1), reduction=reduction)


def inf_norm(x):
    return torch.norm(x, p=float("inf"), dim=-1, keepdim=True)


class SMARTLoss(nn.Module):
    def __init__(self, eval_fn, loss_fn, loss_last_fn=None, norm_fn=inf_norm, num_steps=1,
                 step_size=1e-3, epsilon=1e-6, noise_var=1e-5):
        super().__init__()
        self.eval_fn = eval_fn
        self.loss_fn = loss_fn
        self.loss_last_fn = loss_last_fn if loss_last_fn is not None else loss_fn
        self.norm_fn = norm_fn
        self.num_steps = num_steps
        self.step_size = step_size
        self.epsilon = epsilon
        self.noise_var = noise_var

    def forward(self, embed, state):
        noise = torch.randn_like(embed, requires_grad=True) * self.noise_var
        for i in count():
            embed_perturbed = embed + noise
            state_perturbed = self.eval_fn(embed_perturbed)
            if i == self.num_steps:
                return self.loss_last_fn(state_perturbed, state)
            loss = self.loss_fn(state_perturbed, state.detach())
            noise_gradient, = torch.autograd.grad(loss, noise)
            step = noise + self.step_size * noise_gradient
            step_norm = self.norm_fn(step)
            noise = step / (step_norm + self.epsilon)
            noise = noise.detach().requires_grad_()


class TinyEncoderClassifier(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.pos = nn.Parameter(torch.randn(1, cfg.max_len, cfg.hidden) * 0.02)
        layer = nn.TransformerEncoderLayer(cfg.hidden, cfg.n_heads, 2 * cfg.hidden, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(cfg.hidden, cfg.n_classes)

    def get_input_embeddings(self):
        return self.embeddings

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None):
        if input_ids is not None:
            inputs_embeds = self.embeddings(input_ids)
        h = inputs_embeds + self.pos[:, : inputs_embeds.size(1)]
        pad_mask = None if attention_mask is None else attention_mask == 0
        h = self.encoder(h, src_key_padding_mask=pad_mask)
        if attention_mask is None:
            pooled = h.mean(1)
        else:
            m = attention_mask.unsqueeze(-1).float()
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.classifier(pooled)


class SMARTTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = TinyEncoderClassifier(cfg)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)

    def make_batch(self, gen):
        ids = torch.randint(1, self.cfg.vocab_size, (self.cfg.batch_size, self.cfg.max_len), generator=gen)
        lengths = torch.randint(self.cfg.max_len // 2, self.cfg.max_len + 1, (self.cfg.batch_size,), generator=gen)
        mask = (torch.arange(self.cfg.max_len)[None, :] < lengths[:, None]).long()
        ids = ids * mask
        labels = torch.randint(0, self.cfg.n_classes, (self.cfg.batch_size,), generator=gen)
        return ids, mask, labels

    def compute_loss(self, input_ids, attention_mask, labels):
        embed = self.model.get_input_embeddings()(input_ids)

        def eval_fn(embed):
            return self.model(attention_mask=attention_mask, inputs_embeds=embed)

        smart_loss_fn = SMARTLoss(eval_fn=eval_fn, loss_fn=kl_loss, loss_last_fn=sym_kl_loss)
        state = eval_fn(embed)
        loss = F.cross_entropy(state, labels)
        loss = loss + self.cfg.smart_weight * smart_loss_fn(embed, state)
        return loss

    def train(self):
        gen = torch.Generator().manual_seed(self.cfg.seed)
        self.model.train()
        for step in range(self.cfg.steps):
            input_ids, attention_mask, labels = self.make_batch(gen)
            loss = self.compute_loss(input_ids, attention_mask, labels)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            print(f"step {step}: loss={loss.item():.4f}")


def main():
    cfg = TrainConfig()
    torch.manual_seed(cfg.seed)
    SMARTTrainer(cfg).train()


if __name__ == "__main__":
    main()
