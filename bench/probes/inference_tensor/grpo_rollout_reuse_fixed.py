# expect: clean
# source: https://github.com/huggingface/trl/issues/2953
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class GRPOConfig:
    vocab_size: int = 40
    hidden_size: int = 32
    eos_token_id: int = 0
    max_prompt_length: int = 6
    max_completion_length: int = 8
    num_generations: int = 4
    prompts_per_step: int = 2
    num_iterations: int = 2
    beta: float = 0.04
    epsilon: float = 0.2
    temperature: float = 1.0
    learning_rate: float = 1e-3
    max_steps: int = 4
    seed: int = 0


class TinyCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rnn = nn.GRU(cfg.hidden_size, cfg.hidden_size, batch_first=True)
        self.norm = nn.LayerNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids):
        hidden, _ = self.rnn(self.embed_tokens(input_ids))
        return self.lm_head(self.norm(hidden))


class RolloutEngine:
    """Keeps its own copy of the policy for fast sampling, like a vLLM worker."""

    def __init__(self, model, cfg):
        self.model = copy.deepcopy(model).eval()
        self.cfg = cfg
        self.generator = torch.Generator().manual_seed(cfg.seed + 1)

    def sync_weights(self, model):
        self.model.load_state_dict(model.state_dict())

    @torch.no_grad()
    def generate(self, prompt_ids):
        ids = prompt_ids
        new_tokens = []
        for _ in range(self.cfg.max_completion_length):
            logits = self.model(ids)[:, -1, :] / self.cfg.temperature
            next_token = torch.multinomial(logits.softmax(dim=-1), 1, generator=self.generator)
            new_tokens.append(next_token)
            ids = torch.cat([ids, next_token], dim=1)
        return torch.cat(new_tokens, dim=1)


def selective_log_softmax(logits, index):
    logps = logits.log_softmax(dim=-1)
    return torch.gather(logps, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)


def parity_reward(completion_ids):
    return (completion_ids % 2 == 0).float().mean(dim=1)


class GRPOTrainer:
    def __init__(self, model, cfg, prompts):
        self.model = model
        self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.cfg = cfg
        self.prompts = prompts
        self.engine = RolloutEngine(model, cfg)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
        self.global_step = 0
        self._buffered_inputs = None

    def _get_per_token_logps(self, model, input_ids, completion_ids):
        logits_to_keep = completion_ids.size(1)
        logits = model(input_ids)[:, -logits_to_keep - 1 : -1, :] / self.cfg.temperature
        return selective_log_softmax(logits, completion_ids)

    def _completion_mask(self, completion_ids):
        is_eos = completion_ids == self.cfg.eos_token_id
        eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
        has_eos = is_eos.any(dim=1)
        eos_idx[has_eos] = is_eos.int().argmax(dim=1)[has_eos]
        positions = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1)
        return (positions <= eos_idx.unsqueeze(1)).float()

    def _generate_and_score_completions(self, prompt_ids):
        g = self.cfg.num_generations
        prompt_ids = prompt_ids.repeat_interleave(g, dim=0)
        completion_ids = self.engine.generate(prompt_ids)
        prompt_completion_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        completion_mask = self._completion_mask(completion_ids)

        with torch.no_grad():
            if self.cfg.num_iterations > 1:
                old_per_token_logps = self._get_per_token_logps(self.model, prompt_completion_ids, completion_ids)
            else:
                old_per_token_logps = None
            ref_per_token_logps = self._get_per_token_logps(self.ref_model, prompt_completion_ids, completion_ids)

        rewards = parity_reward(completion_ids)
        mean_grouped = rewards.view(-1, g).mean(dim=1).repeat_interleave(g)
        std_grouped = rewards.view(-1, g).std(dim=1).repeat_interleave(g)
        advantages = (rewards - mean_grouped) / (std_grouped + 1e-4)
        return {
            "prompt_completion_ids": prompt_completion_ids,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "old_per_token_logps": old_per_token_logps,
            "ref_per_token_logps": ref_per_token_logps,
            "advantages": advantages,
            "reward_mean": rewards.mean().item(),
        }

    def _prepare_inputs(self, prompt_ids):
        if self.global_step % self.cfg.num_iterations == 0:
            self.engine.sync_weights(self.model)
            self._buffered_inputs = self._generate_and_score_completions(prompt_ids)
        return self._buffered_inputs

    def compute_loss(self, inputs):
        per_token_logps = self._get_per_token_logps(self.model, inputs["prompt_completion_ids"], inputs["completion_ids"])
        ref = inputs["ref_per_token_logps"]
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
        old = inputs["old_per_token_logps"]
        old = per_token_logps.detach() if old is None else old
        advantages = inputs["advantages"].unsqueeze(1)
        coef_1 = torch.exp(per_token_logps - old)
        coef_2 = torch.clamp(coef_1, 1 - self.cfg.epsilon, 1 + self.cfg.epsilon)
        per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages) + self.cfg.beta * per_token_kl
        mask = inputs["completion_mask"]
        return ((per_token_loss * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()

    def train(self):
        self.model.train()
        for step in range(self.cfg.max_steps):
            start = (step // self.cfg.num_iterations) * self.cfg.prompts_per_step % len(self.prompts)
            prompt_ids = self.prompts[start : start + self.cfg.prompts_per_step]
            inputs = self._prepare_inputs(prompt_ids)
            loss = self.compute_loss(inputs)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.global_step += 1
            print(f"step {step} loss {loss.item():.4f} reward {inputs['reward_mean']:.3f}")


if __name__ == "__main__":
    cfg = GRPOConfig()
    torch.manual_seed(cfg.seed)
    prompts = torch.randint(1, cfg.vocab_size, (8, cfg.max_prompt_length))
    trainer = GRPOTrainer(TinyCausalLM(cfg), cfg, prompts)
    trainer.train()
