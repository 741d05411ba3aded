# expect: clean
# source: https://github.com/huggingface/trl/issues/2983
"""GRPO fine-tuning of a tiny causal language model, structured like TRL's
GRPOTrainer: a config dataclass, reward functions, grouped generations per
prompt, group-normalised advantages, a frozen reference model for the KL term,
buffered rollouts reused for several optimisation iterations (num_iterations)
with the clipped importance-ratio objective, and a small logging callback."""
import copy
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, EOS, PAD = 32, 1, 0


@dataclass
class GRPOConfig:
    learning_rate: float = 5e-4
    num_generations: int = 4
    max_completion_length: int = 6
    num_iterations: int = 2
    epsilon: float = 0.2
    beta: float = 0.04
    temperature: float = 1.0
    max_steps: int = 4
    logging_steps: int = 1
    seed: int = 0
    reward_weights: list = field(default_factory=lambda: [1.0, 0.5])


class TinyCausalLM(nn.Module):
    def __init__(self, vocab=VOCAB, dim=32):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.mixer = nn.GRU(dim, dim, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, input_ids, attention_mask=None, logits_to_keep=None):
        h = self.embed_tokens(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        h, _ = self.mixer(h)
        logits = self.lm_head(self.norm(h))
        if logits_to_keep is not None:
            logits = logits[:, -logits_to_keep:]
        return logits

    def generate(self, input_ids, max_new_tokens, temperature=1.0):
        ids = input_ids
        for _ in range(max_new_tokens):
            probs = F.softmax(self(ids)[:, -1] / temperature, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)
        return ids


def reward_even_tokens(completions, **kwargs):
    return [float((c % 2 == 0).float().mean()) for c in completions]


def reward_short(completions, **kwargs):
    return [1.0 if (c == EOS).any() else 0.0 for c in completions]


class LoggingCallback:
    def on_log(self, step, logs):
        print("step %d  " % step + "  ".join("%s=%.4f" % kv for kv in sorted(logs.items())))


class GRPOTrainer:
    def __init__(self, model, reward_funcs, args, train_dataset, callbacks=()):
        self.model, self.reward_funcs, self.args = model, reward_funcs, args
        self.train_dataset = train_dataset
        self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
        self.callbacks = list(callbacks)
        self.num_iterations = args.num_iterations
        self.global_step = 0
        self._buffered_inputs = None
        self._metrics = {}

    def _get_per_token_logps(self, model, input_ids, attention_mask, logits_to_keep):
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1)
        logits = logits[:, :-1, :] / self.args.temperature
        targets = input_ids[:, -logits_to_keep:]
        return torch.gather(logits.log_softmax(-1), 2, targets.unsqueeze(-1)).squeeze(-1)

    def _generate_and_score_completions(self, prompts):
        prompt_ids = prompts.repeat_interleave(self.args.num_generations, dim=0)
        prompt_mask = torch.ones_like(prompt_ids)
        with torch.no_grad():
            prompt_completion_ids = self.model.generate(prompt_ids, self.args.max_completion_length,
                                                        self.args.temperature)
            completion_ids = prompt_completion_ids[:, prompt_ids.size(1):]
            is_eos = completion_ids == EOS
            eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
            eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
            seq_idx = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1)
            completion_mask = (seq_idx <= eos_idx.unsqueeze(1)).int()
            attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
            logits_to_keep = completion_ids.size(1)
            if self.num_iterations > 1:
                old_per_token_logps = self._get_per_token_logps(self.model, prompt_completion_ids,
                                                                attention_mask, logits_to_keep)
            else:
                old_per_token_logps = None
            ref_per_token_logps = self._get_per_token_logps(self.ref_model, prompt_completion_ids,
                                                            attention_mask, logits_to_keep)

        rewards_per_func = torch.tensor([f(list(completion_ids)) for f in self.reward_funcs]).T
        rewards = (rewards_per_func * torch.tensor(self.args.reward_weights)).sum(dim=1)
        grouped = rewards.view(-1, self.args.num_generations)
        mean_g = grouped.mean(dim=1).repeat_interleave(self.args.num_generations)
        std_g = grouped.std(dim=1).repeat_interleave(self.args.num_generations)
        advantages = (rewards - mean_g) / (std_g + 1e-4)
        self._metrics["reward"] = rewards.mean().item()
        return {"input_ids": prompt_completion_ids, "attention_mask": attention_mask,
                "completion_mask": completion_mask.clone(), "logits_to_keep": logits_to_keep,
                "old_per_token_logps": old_per_token_logps, "ref_per_token_logps": ref_per_token_logps,
                "advantages": advantages}

    def _prepare_inputs(self, prompts):
        if self.global_step % self.num_iterations == 0:
            self._buffered_inputs = self._generate_and_score_completions(prompts)
        return self._buffered_inputs

    def compute_loss(self, model, inputs):
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        completion_mask, logits_to_keep = inputs["completion_mask"], inputs["logits_to_keep"]
        per_token_logps = self._get_per_token_logps(model, input_ids, attention_mask, logits_to_keep)
        ref = inputs["ref_per_token_logps"].clone()
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
        old = inputs["old_per_token_logps"]
        old = per_token_logps.detach() if old is None else old.clone()
        coef_1 = torch.exp(per_token_logps - old)
        coef_2 = torch.clamp(coef_1, 1 - self.args.epsilon, 1 + self.args.epsilon)
        adv = inputs["advantages"].unsqueeze(1)
        per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv) + self.args.beta * per_token_kl
        loss = (per_token_loss * completion_mask).sum() / completion_mask.sum()
        self._metrics["kl"] = ((per_token_kl * completion_mask).sum() / completion_mask.sum()).item()
        return loss

    def training_step(self, prompts):
        self.model.train()
        inputs = self._prepare_inputs(prompts)
        loss = self.compute_loss(self.model, inputs)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def train(self):
        for step in range(self.args.max_steps):
            prompts = self.train_dataset[step % len(self.train_dataset)]
            loss = self.training_step(prompts)
            self.global_step += 1
            if self.global_step % self.args.logging_steps == 0:
                for cb in self.callbacks:
                    cb.on_log(self.global_step, dict(self._metrics, loss=loss.item()))


def main():
    args = GRPOConfig()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    dataset = [torch.randint(2, VOCAB, (2, 4), generator=g) for _ in range(3)]
    trainer = GRPOTrainer(TinyCausalLM(), [reward_even_tokens, reward_short], args, dataset,
                          callbacks=[LoggingCallback()])
    trainer.train()


if __name__ == "__main__":
    main()
