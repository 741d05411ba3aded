# expect: inference_tensor
# source: https://github.com/open-lm-engine/lm-engine/pull/253
"""Knowledge distillation of a small causal LM from a larger teacher.

Mirrors the model-wrapper layout of lm-engine: a ModelWrapperForPretraining
base class builds the student from a config dict, prepares shifted input /
label batches and computes the language-modelling loss; the subclass
ModelWrapperForDistillation adds a frozen teacher (always kept in eval mode)
and a KL term between teacher and student next-token distributions, with
the direction selected by a KLDivergenceMethod enum.  A Trainer runs the
optimisation loop with warmup/cosine LR and an evaluation pass under
inference mode.  Token batches are synthetic.
"""
import math
from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn as nn
import torch.nn.functional as F


class KLDivergenceMethod(Enum):
    forward = "forward"
    backward = "backward"


@dataclass
class CausalLMOutputWithPast:
    logits: torch.Tensor
    past_key_values: tuple = None


@dataclass
class TrainingArgs:
    vocab_size: int = 64
    sequence_length: int = 12
    micro_batch_size: int = 4
    student_hidden: int = 32
    teacher_hidden: int = 64
    num_steps: int = 4
    eval_interval: int = 2
    lr: float = 3e-3
    warmup_steps: int = 1
    kl_divergence_weight: float = 1.0
    temperature: float = 2.0
    kl_divergence_method: KLDivergenceMethod = KLDivergenceMethod.backward


class TinyCausalLM(nn.Module):
    def __init__(self, vocab_size, hidden_size, num_heads=4):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, hidden_size)
        self.wpe = nn.Embedding(128, hidden_size)
        self.attn = nn.MultiheadAttention(hidden_size, num_heads, batch_first=True)
        self.ln_1 = nn.LayerNorm(hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, 4 * hidden_size), nn.GELU(),
                                 nn.Linear(4 * hidden_size, hidden_size))
        self.ln_2 = nn.LayerNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids, position_ids=None, return_dict=True):
        T = input_ids.size(1)
        if position_ids is None:
            position_ids = torch.arange(T).unsqueeze(0)
        h = self.wte(input_ids) + self.wpe(position_ids)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        a, _ = self.attn(self.ln_1(h), self.ln_1(h), self.ln_1(h), attn_mask=mask, need_weights=False)
        h = h + a
        h = h + self.mlp(self.ln_2(h))
        return CausalLMOutputWithPast(logits=self.lm_head(h))


def get_autoregressive_language_modeling_loss(lm_logits, labels, reduction="sum"):
    return F.cross_entropy(lm_logits.reshape(-1, lm_logits.size(-1)), labels.reshape(-1), reduction=reduction)


class ModelWrapperForPretraining(nn.Module):
    def __init__(self, pretrained_config: dict, sequence_length: int):
        super().__init__()
        self.pretrained_config = pretrained_config
        self.sequence_length = sequence_length
        self._setup_config()
        self._setup_model()

    def _setup_config(self) -> None:
        self.config = dict(self.pretrained_config)

    def _setup_model(self) -> None:
        self.model = TinyCausalLM(self.config["vocab_size"], self.config["hidden_size"])

    def _prepare_model_inputs(self, batch: torch.Tensor) -> dict:
        tokens = batch
        input_ids = tokens[:, :-1]
        labels = tokens[:, 1:]
        position_ids = torch.arange(input_ids.size(1)).unsqueeze(0).expand_as(input_ids)
        return {"input_ids": input_ids, "position_ids": position_ids, "labels": labels}

    def forward(self, batch, lm_loss_multiplier: float = 1) -> dict:
        batch = self._prepare_model_inputs(batch)
        labels = batch.pop("labels")
        output = self.model(**batch, return_dict=True)
        lm_loss = get_autoregressive_language_modeling_loss(output.logits, labels) * lm_loss_multiplier
        return {"loss": lm_loss, "lm_loss": lm_loss}

    def has_teacher_model(self) -> bool:
        return False


class ModelWrapperForDistillation(ModelWrapperForPretraining):
    def __init__(self, pretrained_config, sequence_length, teacher_config, kl_divergence_method,
                 kl_divergence_weight=1.0, temperature=1.0):
        self.teacher_config = teacher_config
        self.kl_divergence_method = kl_divergence_method
        self.kl_divergence_weight = kl_divergence_weight
        self.temperature = temperature
        super().__init__(pretrained_config, sequence_length)

    def _setup_model(self) -> None:
        super()._setup_model()
        self.teacher_model = TinyCausalLM(self.teacher_config["vocab_size"], self.teacher_config["hidden_size"])
        for p in self.teacher_model.parameters():
            p.requires_grad_(False)
        self.teacher_model.eval()

    def forward(self, batch, lm_loss_multiplier: float = 1) -> dict:
        batch = self._prepare_model_inputs(batch)
        labels = batch.pop("labels")
        output = self.model(**batch, return_dict=True)
        student_logits = output.logits
        del output

        lm_loss = get_autoregressive_language_modeling_loss(student_logits, labels) * lm_loss_multiplier

        with torch.inference_mode():
            output = self.teacher_model(**batch, return_dict=True)
            teacher_logits = output.logits.float()
            teacher_probs = F.softmax(teacher_logits / self.temperature, dim=-1).view(-1, teacher_logits.size(-1))

        student_log_softmax = F.log_softmax(student_logits / self.temperature, dim=-1).view(
            -1, student_logits.size(-1))
        kl_divergence = self._kl_divergence(student_log_softmax, teacher_probs)

        loss = lm_loss + self.kl_divergence_weight * kl_divergence
        return {"loss": loss, "lm_loss": lm_loss, "kl_divergence": kl_divergence}

    def _kl_divergence(self, student_log_softmax, teacher_probs):
        if self.kl_divergence_method == KLDivergenceMethod.forward:
            # sum [student * ln(student / teacher)]
            teacher_log = teacher_probs.clamp_min(1e-8).log()
            return F.kl_div(teacher_log, student_log_softmax, reduction="batchmean", log_target=True)
        # sum [teacher * ln(teacher / student)]
        return F.kl_div(student_log_softmax, teacher_probs, reduction="batchmean") * self.temperature ** 2  # raises

    def has_teacher_model(self) -> bool:
        return True

    def train(self, mode: bool = True):
        super().train(mode)
        # teacher model should always be in eval mode
        self.teacher_model.eval()
        return self


def get_scheduler(optimizer, warmup_steps, total_steps):
    def lr_lambda(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * progress))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


class Trainer:
    def __init__(self, args: TrainingArgs, model: ModelWrapperForDistillation):
        self.args = args
        self.model = model
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
        self.scheduler = get_scheduler(self.optimizer, args.warmup_steps, args.num_steps)
        self.generator = torch.Generator().manual_seed(1234)
        self.metrics = []

    def get_batch(self):
        return torch.randint(0, self.args.vocab_size,
                             (self.args.micro_batch_size, self.args.sequence_length + 1), generator=self.generator)

    def train_step(self, step: int) -> dict:
        self.model.train()
        batch = self.get_batch()
        tokens_per_batch = batch.size(0) * (batch.size(1) - 1)
        out = self.model(batch, lm_loss_multiplier=1 / tokens_per_batch)
        self.optimizer.zero_grad()
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return {k: v.item() for k, v in out.items()}

    def evaluate(self) -> float:
        self.model.eval()
        with torch.inference_mode():
            batch = self.get_batch()
            out = self.model(batch, lm_loss_multiplier=1 / (batch.size(0) * (batch.size(1) - 1)))
        return out["lm_loss"].item()

    def train(self):
        for step in range(self.args.num_steps):
            metrics = self.train_step(step)
            if (step + 1) % self.args.eval_interval == 0:
                metrics["val_lm_loss"] = self.evaluate()
            self.metrics.append(metrics)
            print(step, {k: round(v, 4) for k, v in metrics.items()})


def main():
    torch.manual_seed(0)
    args = TrainingArgs()
    model = ModelWrapperForDistillation(
        pretrained_config={"vocab_size": args.vocab_size, "hidden_size": args.student_hidden},
        sequence_length=args.sequence_length,
        teacher_config={"vocab_size": args.vocab_size, "hidden_size": args.teacher_hidden},
        kl_divergence_method=args.kl_divergence_method,
        kl_divergence_weight=args.kl_divergence_weight,
        temperature=args.temperature,
    )
    Trainer(args, model).train()


if __name__ == "__main__":
    main()
