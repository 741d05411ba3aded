# expect: clean
# source: https://github.com/unslothai/unsloth/issues/2670
"""GRPO fine-tuning of a small causal LM with rule-based rewards (TRL/unsloth GRPOTrainer layout).

For each prompt the policy samples a group of completions with a fast
generation path, rewards are computed by reward functions and normalised
within the group into advantages; the batch of rollouts is buffered and reused
for num_iterations optimisation steps (clipped ratio against the rollout-time
log-probs, KL to a frozen reference model).  GRPOConfig dataclass, AdamW +
linear decay.  Synthetic prompts over a 40-token vocabulary, CPU only.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GRPOConfig:
    vocab_size: int = 40
    hidden: int = 32
    num_generations: int = 4
    max_prompt_length: int = 6
    max_completion_length: int = 5
    per_device_train_batch_size: int = 2
    num_iterations: int = 2
    epsilon: float = 0.2
    beta: float = 0.04
    learning_rate: float = 5e-4
    max_steps: int = 3
    temperature: float = 1.0


class TinyCausalLM(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.lm_head = nn.Linear(hidden, vocab)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        h, _ = self.rnn(h)
        return self.lm_head(h)

    def fast_generate(self, prompt_ids, max_new_tokens, temperature, generator):
        ids = prompt_ids
        for _ in range(max_new_tokens):
            logits = self(ids)[:, -1] / temperature
            nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=generator)
            ids = torch.cat([ids, nxt], 1)
        return ids


def reward_len(completions, **kwargs):
    return [float((c % 2 == 0).sum()) for c in completions]


def reward_stop(completions, **kwargs):
    return [1.0 if c[-1].item() == 0 else 0.0 for c in completions]


class GRPOTrainer:
    def __init__(self, model, ref_model, reward_funcs, args, train_dataset):
        self.model, self.ref_model, self.reward_funcs = model, ref_model, reward_funcs
        self.args, self.train_dataset = args, train_dataset
        self.ref_model.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
        self.lr_scheduler = torch.optim.lr_scheduler.LinearLR(self.optimizer, 1.0, 0.1, total_iters=args.max_steps)
        self._buffered_inputs = None
        self._step = 0
        self.gen = torch.Generator().manual_seed(0)
        self.metrics = {"reward": [], "kl": []}

    @staticmethod
    def _get_per_token_logps(model, input_ids, logits_to_keep):
        logits = model(input_ids)[:, :-1][:, -logits_to_keep:]
        targets = input_ids[:, -logits_to_keep:]
        return torch.gather(F.log_softmax(logits, -1), 2, targets.unsqueeze(-1)).squeeze(-1)

    def _generate_and_score_completions(self, prompts):
        args = self.args
        prompt_ids = prompts.repeat_interleave(args.num_generations, 0)
        with torch.no_grad():
            prompt_completion_ids = self.model.fast_generate(prompt_ids, args.max_completion_length,
                                                             args.temperature, self.gen)
            completion_ids = prompt_completion_ids[:, prompt_ids.shape[1]:]
            is_eos = completion_ids == 0
            eos_idx = torch.where(is_eos.any(1), is_eos.int().argmax(1), torch.full_like(is_eos[:, 0], is_eos.shape[1], dtype=torch.long))
            seq_idx = torch.arange(is_eos.shape[1]).expand(is_eos.shape[0], -1)
            completion_mask = (seq_idx <= eos_idx[:, None]).float()
            logits_to_keep = completion_ids.shape[1]
            old_per_token_logps = self._get_per_token_logps(self.model, prompt_completion_ids, logits_to_keep)
            ref_per_token_logps = self._get_per_token_logps(self.ref_model, prompt_completion_ids, logits_to_keep)
        rewards = torch.zeros(len(completion_ids))
        for fn in self.reward_funcs:
            rewards += torch.tensor(fn(completion_ids))
        grouped = rewards.view(-1, args.num_generations)
        advantages = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
        self.metrics["reward"].append(rewards.mean().item())
        return dict(prompt_completion_ids=prompt_completion_ids, completion_mask=completion_mask,
                    old_per_token_logps=old_per_token_logps, ref_per_token_logps=ref_per_token_logps,
                    advantages=advantages.view(-1), logits_to_keep=logits_to_keep)

    def _prepare_inputs(self, prompts):
        if self._step % self.args.num_iterations == 0:
            self._buffered_inputs = self._generate_and_score_completions(prompts)
        return self._buffered_inputs

    def compute_loss(self, inputs):
        per_token_logps = self._get_per_token_logps(self.model, inputs["prompt_completion_ids"],
                                                    inputs["logits_to_keep"])
        ref = inputs["ref_per_token_logps"]
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
        coef_1 = torch.exp(per_token_logps - inputs["old_per_token_logps"])
        coef_2 = torch.clamp(coef_1, 1 - self.args.epsilon, 1 + self.args.epsilon)
        adv = inputs["advantages"].unsqueeze(1)
        per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv) + self.args.beta * per_token_kl
        mask = inputs["completion_mask"]
        loss = ((per_token_loss * mask).sum(1) / mask.sum(1)).mean()
        self.metrics["kl"].append(((per_token_kl * mask).sum() / mask.sum()).item())
        return loss

    def training_step(self, prompts):
        self.model.train()
        inputs = self._prepare_inputs(prompts)
        loss = self.compute_loss(inputs)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.lr_scheduler.step()
        self._step += 1
        return loss.item()

    def train(self):
        for step in range(self.args.max_steps):
            prompts = self.train_dataset[step % len(self.train_dataset)]
            for _ in range(self.args.num_iterations):
                loss = self.training_step(prompts)
            print("step %d loss %.4f reward %.3f" % (step, loss, self.metrics["reward"][-1]))


def main():
    torch.manual_seed(0)
    args = GRPOConfig()
    model = TinyCausalLM(args.vocab_size, args.hidden)
    ref_model = TinyCausalLM(args.vocab_size, args.hidden)
    ref_model.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(1)
    dataset = [torch.randint(1, args.vocab_size, (args.per_device_train_batch_size, args.max_prompt_length),
                             generator=g) for _ in range(3)]
    GRPOTrainer(model, ref_model, [reward_len, reward_stop], args, dataset).train()


if __name__ == "__main__":
    main()
