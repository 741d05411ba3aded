# expect: clean
# source: https://github.com/hiyouga/LlamaFactory/issues/184
"""RLHF PPO fine-tuning of a small causal language model (LLaMA-Factory style).

A tiny decoder-only LM with rotary position embeddings and a value head is
trained with PPO: a rollout phase samples responses to prompts and scores them
with a frozen reward model, then several PPO epochs update the policy and value
head on mini-batches.  Prompts and the reward model are seeded synthetic data.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArgs:
    vocab_size: int = 64
    hidden_size: int = 32
    num_heads: int = 4
    num_layers: int = 2
    rope_theta: float = 10000.0
    max_position_embeddings: int = 32


@dataclass
class FinetuningArgs:
    ppo_epochs: int = 2
    mini_batch_size: int = 4
    batch_size: int = 8
    prompt_len: int = 6
    max_new_tokens: int = 6
    learning_rate: float = 3e-4
    value_lr: float = 1e-3
    cliprange: float = 0.2
    cliprange_value: float = 0.2
    vf_coef: float = 0.5
    kl_coef: float = 0.05
    num_steps: int = 2
    seed: int = 0
    log_every: int = 1
    model: ModelArgs = field(default_factory=ModelArgs)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000.0):
        super().__init__()
        self.max_position_embeddings = max_position_embeddings
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_seq_len_cached = 0
        self.cos_cached = self.sin_cached = None

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos_cached = emb.cos()
        self.sin_cached = emb.sin()

    def forward(self, seq_len):
        if self.cos_cached is None or seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(max(seq_len, self.max_position_embeddings))
        return self.cos_cached[:seq_len], self.sin_cached[:seq_len]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.num_heads = args.num_heads
        self.head_dim = args.hidden_size // args.num_heads
        self.qkv = nn.Linear(args.hidden_size, 3 * args.hidden_size, bias=False)
        self.o_proj = nn.Linear(args.hidden_size, args.hidden_size, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim, args.max_position_embeddings, base=args.rope_theta)

    def forward(self, x):
        bsz, q_len, _ = x.shape
        q, k, v = (t.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        cos, sin = self.rotary_emb(q_len)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        mask = torch.triu(torch.ones(q_len, q_len, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        out = out.transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(out)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(args.hidden_size), nn.LayerNorm(args.hidden_size)
        self.attn = Attention(args)
        self.mlp = nn.Sequential(nn.Linear(args.hidden_size, 4 * args.hidden_size), nn.GELU(),
                                 nn.Linear(4 * args.hidden_size, args.hidden_size))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CausalLM(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.embed = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(args) for _ in range(args.num_layers)])
        self.norm = nn.LayerNorm(args.hidden_size)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(self, input_ids):
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        return self.lm_head(h), h


class AutoModelForCausalLMWithValueHead(nn.Module):
    def __init__(self, pretrained_model):
        super().__init__()
        self.pretrained_model = pretrained_model
        hidden = pretrained_model.lm_head.in_features
        self.v_head = nn.Sequential(nn.Dropout(0.0), nn.Linear(hidden, 1))

    def forward(self, input_ids):
        logits, hidden = self.pretrained_model(input_ids)
        values = self.v_head(hidden).squeeze(-1)
        return logits, values

    def generate(self, input_ids, max_new_tokens, generator):
        for _ in range(max_new_tokens):
            logits, _ = self.pretrained_model(input_ids)
            probs = F.softmax(logits[:, -1, :], dim=-1)
            next_tok = torch.multinomial(probs, 1, generator=generator)
            input_ids = torch.cat([input_ids, next_tok], dim=1)
        return input_ids


class RewardModel(nn.Module):
    """Frozen scorer: prefers responses with many even token ids."""
    def __init__(self, vocab_size):
        super().__init__()
        self.table = nn.Embedding(vocab_size, 1)
        with torch.no_grad():
            self.table.weight.copy_((torch.arange(vocab_size) % 2 == 0).float()[:, None])
        self.requires_grad_(False)

    def forward(self, response_ids):
        return self.table(response_ids).squeeze(-1).mean(dim=1)


def logprobs_from_logits(logits, labels):
    logp = F.log_softmax(logits, dim=-1)
    return torch.gather(logp, 2, labels.unsqueeze(2)).squeeze(-1)


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0
    def update(self, val, n=1):
        self.sum, self.count = self.sum + val * n, self.count + n
    @property
    def avg(self):
        return self.sum / max(self.count, 1)


class LogCallback:
    def __init__(self, every):
        self.every = every
    def on_step_end(self, step, logs):
        if step % self.every == 0:
            print("step {}: ".format(step) + ", ".join("{}={:.4f}".format(k, v) for k, v in logs.items()))


class CustomPPOTrainer:
    def __init__(self, args: FinetuningArgs, model, ref_model, reward_model, callbacks):
        self.args = args
        self.model = model
        self.ref_model = ref_model
        self.reward_model = reward_model
        self.callbacks = callbacks
        self.generator = torch.Generator().manual_seed(args.seed)
        policy_params = list(model.pretrained_model.parameters())
        self.optimizer = torch.optim.AdamW(policy_params, lr=args.learning_rate)
        self.value_optimizer = torch.optim.Adam(model.v_head.parameters(), lr=args.value_lr)
        self.lr_scheduler = torch.optim.lr_scheduler.LinearLR(self.optimizer, 1.0, 0.1, total_iters=args.num_steps)
        self.loss_meter = AverageMeter()
        self.reward_meter = AverageMeter()

    @torch.no_grad()
    def get_inputs(self, prompts):
        self.model.eval()
        seq = self.model.generate(prompts, self.args.max_new_tokens, self.generator)
        return seq[:, :prompts.size(1)], seq[:, prompts.size(1):]

    @torch.no_grad()
    def get_rewards(self, responses):
        return self.reward_model(responses)

    @torch.no_grad()
    def batched_forward_pass(self, model, queries, responses):
        input_ids = torch.cat([queries, responses], dim=1)
        logits, values = model(input_ids)
        start = queries.size(1) - 1
        logprobs = logprobs_from_logits(logits[:, start:-1], responses)
        return logprobs, values[:, start:-1]

    def compute_advantages(self, rewards, logprobs, ref_logprobs, values):
        kl = logprobs - ref_logprobs
        token_rewards = -self.args.kl_coef * kl
        token_rewards[:, -1] += rewards
        returns = token_rewards.flip(1).cumsum(1).flip(1)
        advantages = returns - values
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages, returns

    def train_step(self, queries, responses, old_logprobs, old_values, advantages, returns):
        self.model.train()
        input_ids = torch.cat([queries, responses], dim=1)
        logits, vpred = self.model(input_ids)
        start = queries.size(1) - 1
        logprobs = logprobs_from_logits(logits[:, start:-1], responses)
        vpred = vpred[:, start:-1]

        ratio = torch.exp(logprobs - old_logprobs)
        pg_losses = -advantages * ratio
        pg_losses2 = -advantages * torch.clamp(ratio, 1 - self.args.cliprange, 1 + self.args.cliprange)
        pg_loss = torch.max(pg_losses, pg_losses2).mean()

        vpredclipped = old_values + torch.clamp(vpred - old_values, -self.args.cliprange_value, self.args.cliprange_value)
        vf_loss = 0.5 * torch.max((vpred - returns) ** 2, (vpredclipped - returns) ** 2).mean()
        loss = pg_loss + self.args.vf_coef * vf_loss

        self.optimizer.zero_grad(); self.value_optimizer.zero_grad()
        loss.backward()
        self.optimizer.step(); self.value_optimizer.step()
        return loss.item()

    def ppo_train(self, prompt_batches):
        for step, prompts in enumerate(prompt_batches, start=1):
            queries, responses = self.get_inputs(prompts)
            rewards = self.get_rewards(responses)
            old_logprobs, old_values = self.batched_forward_pass(self.model, queries, responses)
            ref_logprobs, _ = self.batched_forward_pass(self.ref_model, queries, responses)
            advantages, returns = self.compute_advantages(rewards, old_logprobs, ref_logprobs, old_values)

            for _ in range(self.args.ppo_epochs):
                perm = torch.randperm(queries.size(0), generator=self.generator)
                for i in range(0, queries.size(0), self.args.mini_batch_size):
                    idx = perm[i:i + self.args.mini_batch_size]
                    loss = self.train_step(queries[idx], responses[idx], old_logprobs[idx],
                                           old_values[idx], advantages[idx], returns[idx])
                    self.loss_meter.update(loss, n=len(idx))
            self.lr_scheduler.step()
            self.reward_meter.update(rewards.mean().item(), n=rewards.size(0))
            for cb in self.callbacks:
                cb.on_step_end(step, {"loss": self.loss_meter.avg, "reward": self.reward_meter.avg,
                                      "lr": self.lr_scheduler.get_last_lr()[0]})

    def evaluate(self, prompts):
        return self.get_rewards(self.get_inputs(prompts)[1]).mean().item()


def main():
    args = FinetuningArgs()
    torch.manual_seed(args.seed)
    policy = AutoModelForCausalLMWithValueHead(CausalLM(args.model))
    ref_model = AutoModelForCausalLMWithValueHead(CausalLM(args.model))
    ref_model.load_state_dict(policy.state_dict())
    ref_model.requires_grad_(False)
    reward_model = RewardModel(args.model.vocab_size)

    g = torch.Generator().manual_seed(args.seed + 1)
    prompt_batches = [torch.randint(0, args.model.vocab_size, (args.batch_size, args.prompt_len), generator=g)
                      for _ in range(args.num_steps)]

    trainer = CustomPPOTrainer(args, policy, ref_model, reward_model, [LogCallback(args.log_every)])
    trainer.ppo_train(prompt_batches)
    print("eval reward: {:.4f}".format(trainer.evaluate(prompt_batches[0])))


if __name__ == "__main__":
    main()
