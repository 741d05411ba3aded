# expect: clean
# source: https://github.com/huggingface/trl/issues/3089
"""GRPO fine-tuning of a tiny causal LM with LoRA adapters and gradient
checkpointing, modelled on TRL's GRPOTrainer + PEFT. Prompts are random token
sequences; the reward favours completions that repeat the prompt's last token.
"""
import math
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class GRPOConfig:
    vocab_size: int = 50
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    prompt_len: int = 6
    max_completion_length: int = 5
    num_generations: int = 4
    per_device_train_batch_size: int = 2
    learning_rate: float = 5e-3
    beta: float = 0.0
    gradient_checkpointing: bool = True
    gradient_checkpointing_use_reentrant: bool = True
    lora_r: int = 4
    lora_alpha: int = 8
    max_steps: int = 3
    seed: int = 0


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.v_proj, self.o_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        B, T, D = x.shape
        h = self.ln1(x)
        q = self.q_proj(h).view(B, T, self.h, -1).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.h, -1).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.h, -1).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(64, cfg.d_model) * 0.02)
        self.layers = nn.ModuleList([Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers)])
        self.norm = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.gradient_checkpointing = False
        self._gc_kwargs = {}

    def get_input_embeddings(self):
        return self.embed_tokens

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.gradient_checkpointing = True
        self._gc_kwargs = gradient_checkpointing_kwargs or {"use_reentrant": True}

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(
            make_inputs_require_grads)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids) + self.pos[: input_ids.size(1)]
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(layer, x, **self._gc_kwargs)
            else:
                x = layer(x)
        return self.lm_head(self.norm(x))


class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


def get_peft_model(model, r, alpha, target_modules=("q_proj", "v_proj")):
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.layers:
        for name in target_modules:
            setattr(block, name, LoRALinear(getattr(block, name), r, alpha))
    model.is_peft_model = True
    return model


def is_peft_model(model):
    return getattr(model, "is_peft_model", False)


def repeat_last_token_reward(prompts, completions):
    return (completions == prompts[:, -1:]).float().mean(-1)


class GRPOTrainer:
    def __init__(self, model, reward_func, args):
        self.args = args
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                {"use_reentrant": args.gradient_checkpointing_use_reentrant})
            if is_peft_model(model):
                model.enable_input_require_grads()
        self.model = model
        self.reward_func = reward_func
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.learning_rate)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: 1.0 - s / max(args.max_steps, 1))
        self.state = {"global_step": 0, "log_history": []}

    @torch.no_grad()
    def _generate(self, prompts):
        self.model.eval()
        ids = prompts.repeat_interleave(self.args.num_generations, dim=0)
        for _ in range(self.args.max_completion_length):
            logits = self.model(ids)[:, -1]
            nxt = torch.multinomial(F.softmax(logits, -1), 1)
            ids = torch.cat([ids, nxt], dim=1)
        self.model.train()
        return ids

    def _get_per_token_logps(self, model, input_ids, logits_to_keep):
        logits = model(input_ids)[:, :-1][:, -logits_to_keep:]
        targets = input_ids[:, -logits_to_keep:]
        return torch.gather(F.log_softmax(logits, -1), 2, targets.unsqueeze(-1)).squeeze(-1)

    def compute_loss(self, prompts):
        G, L = self.args.num_generations, self.args.max_completion_length
        ids = self._generate(prompts)
        completions = ids[:, -L:]
        rewards = self.reward_func(prompts.repeat_interleave(G, 0), completions)
        grouped = rewards.view(-1, G)
        adv = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
        adv = adv.view(-1, 1)
        per_token_logps = self._get_per_token_logps(self.model, ids, L)
        per_token_loss = -torch.exp(per_token_logps - per_token_logps.detach()) * adv
        return per_token_loss.mean(), rewards.mean().item()

    def training_step(self, prompts):
        self.model.train()
        loss, reward = self.compute_loss(prompts)
        loss.backward()
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
        self.state["global_step"] += 1
        self.state["log_history"].append({"loss": loss.item(), "reward": reward})
        return loss.item()

    def train(self, prompt_batches):
        for prompts in prompt_batches[: self.args.max_steps]:
            self.training_step(prompts)
        return self.state


def main():
    args = GRPOConfig()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    model = get_peft_model(TinyCausalLM(args), args.lora_r, args.lora_alpha)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print("trainable params:", n_trainable)
    g = torch.Generator().manual_seed(args.seed)
    batches = [torch.randint(0, args.vocab_size, (args.per_device_train_batch_size, args.prompt_len),
                             generator=g) for _ in range(args.max_steps)]
    trainer = GRPOTrainer(model, repeat_last_token_reward, args)
    state = trainer.train(batches)
    for i, log in enumerate(state["log_history"]):
        print(f"step {i}: loss {log['loss']:.4f} reward {log['reward']:.3f}")


if __name__ == "__main__":
    main()
