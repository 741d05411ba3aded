# expect: inference_tensor
# source: https://github.com/hiyouga/LlamaFactory/issues/220
"""RLHF PPO stage with LoRA adapters, modelled on LLaMA-Efficient-Tuning.

A tiny LLaMA-like causal LM (RMSNorm, LoRA on q/v projections) is wrapped with a
value head.  Two LoRA adapters live in the same model: "default" (the policy)
and "reward" (the reward model, with its own value-head weights swapped in by
`replace_model`).  PPOPeftTrainer subclasses a compact trl-like PPOTrainer and
implements the ppo_train loop: sample responses with `generate` (layer norms
temporarily cast to fp16 for generation), score them with the reward adapter,
then run PPO epochs on the policy adapter.
"""
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERNORM_NAMES = ["norm", "ln_f", "ln_attn", "ln_mlp"]


@dataclass
class FinetuningArguments:
    lora_rank: int = 4
    lora_alpha: float = 8.0


@dataclass
class PPOConfig:
    learning_rate: float = 1e-3
    batch_size: int = 4
    mini_batch_size: int = 2
    ppo_epochs: int = 2
    gamma: float = 1.0
    lam: float = 0.95
    cliprange: float = 0.2
    vf_coef: float = 0.1


class LoraLinear(nn.Linear):
    def __init__(self, in_f, out_f, r, alpha, adapters=("default", "reward")):
        super().__init__(in_f, out_f, bias=False)
        self.weight.requires_grad_(False)
        self.lora_A = nn.ParameterDict({n: nn.Parameter(torch.randn(r, in_f) * 0.02) for n in adapters})
        self.lora_B = nn.ParameterDict({n: nn.Parameter(torch.randn(out_f, r) * 0.02) for n in adapters})
        self.scaling = alpha / r
        self.active_adapter = "default"

    def forward(self, x):
        A, B = self.lora_A[self.active_adapter], self.lora_B[self.active_adapter]
        return F.linear(x, self.weight) + (x @ A.t() @ B.t()) * self.scaling


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states  # raises


class DecoderLayer(nn.Module):
    def __init__(self, d, n_heads, fargs: FinetuningArguments):
        super().__init__()
        self.n_heads = n_heads
        self.input_layernorm = RMSNorm(d)
        self.q_proj = LoraLinear(d, d, fargs.lora_rank, fargs.lora_alpha)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = LoraLinear(d, d, fargs.lora_rank, fargs.lora_alpha)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d, bias=False), nn.SiLU(), nn.Linear(2 * d, d, bias=False))

    def forward(self, x):
        B, T, D = x.shape
        h = self.input_layernorm(x)
        q, k, v = (p(h).view(B, T, self.n_heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyLlamaForCausalLM(nn.Module):
    def __init__(self, vocab_size, d, n_layers, n_heads, fargs):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d)
        self.layers = nn.ModuleList([DecoderLayer(d, n_heads, fargs) for _ in range(n_layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab_size, bias=False)
        for n, p in self.named_parameters():
            if "lora_" not in n:
                p.requires_grad_(False)

    def set_adapter(self, name):
        for m in self.modules():
            if isinstance(m, LoraLinear):
                m.active_adapter = name

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        return self.lm_head(h), h


class ValueHead(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.summary = nn.Linear(d, 1)

    def forward(self, hidden_states):
        return self.summary(hidden_states).squeeze(-1)


class AutoModelForCausalLMWithValueHead(nn.Module):
    def __init__(self, pretrained_model, d):
        super().__init__()
        self.pretrained_model = pretrained_model
        self.v_head = ValueHead(d)

    def forward(self, input_ids):
        lm_logits, last_hidden_state = self.pretrained_model(input_ids)
        return lm_logits, None, self.v_head(last_hidden_state)

    def generate(self, input_ids, max_new_tokens, top_k=0.0, top_p=1.0, do_sample=True, **kwargs):
        out = input_ids
        for _ in range(max_new_tokens):
            logits, _ = self.pretrained_model(out)
            probs = torch.softmax(logits[:, -1].float(), -1)
            out = torch.cat([out, torch.multinomial(probs, 1)], dim=1)
        return out


def replace_model(model: AutoModelForCausalLMWithValueHead, target: str) -> None:
    if target == "reward":  # save default head temporarily
        valuehead_state_dict = model.v_head.state_dict()
        setattr(model, "default_head_weight", valuehead_state_dict["summary.weight"].clone())
        setattr(model, "default_head_bias", valuehead_state_dict["summary.bias"].clone())
    model.pretrained_model.set_adapter(target)  # set the LoRA adapter to be active
    model.v_head.load_state_dict({
        "summary.weight": getattr(model, "{}_head_weight".format(target)),
        "summary.bias": getattr(model, "{}_head_bias".format(target))
    })


def cast_layernorm_dtype(model, layer_norm_names: List[str] = LAYERNORM_NAMES,
                         layer_norm_params: Optional[Dict[str, torch.Tensor]] = None):
    layer_norm_state_dict = {}
    for name, param in model.named_parameters():
        if param.ndim == 1 and any(layer_norm_name in name for layer_norm_name in layer_norm_names):
            if layer_norm_params is not None:
                param.data = layer_norm_params[name]  # restore float32 weights
            else:
                layer_norm_state_dict[name] = param.data.detach().clone()  # store float32 weights for stability
                param.data = param.data.to(torch.float16)
    return model, layer_norm_state_dict


class AverageMeter:
    def __init__(self):
        self.val, self.avg, self.sum, self.count = 0, 0, 0, 0

    def update(self, val, n=1):
        self.val, self.sum, self.count = val, self.sum + val * n, self.count + n
        self.avg = self.sum / self.count


class PPOTrainer:
    """Compact subset of trl.PPOTrainer."""

    def __init__(self, config: PPOConfig, model, tokenizer, dataset):
        self.config, self.model, self.tokenizer, self.dataset = config, model, tokenizer, dataset
        self.optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
        self.dataloader = [dataset[i:i + config.batch_size] for i in range(0, len(dataset), config.batch_size)]

    def prepare_model_inputs(self, queries, responses):
        seqs = [torch.cat([q, r]) for q, r in zip(queries, responses)]
        return {"input_ids": nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=self.tokenizer.pad_token_id)}

    def batched_forward_pass(self, queries, responses):
        input_ids = self.prepare_model_inputs(queries, responses)["input_ids"]
        logits, _, values = self.model(input_ids)
        logprobs = torch.log_softmax(logits[:, :-1], -1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
        masks = torch.zeros_like(logprobs)
        for i, (q, r) in enumerate(zip(queries, responses)):
            masks[i, len(q) - 1:len(q) - 1 + len(r)] = 1.0
        return logprobs, values[:, :-1], masks

    def compute_advantages(self, values, rewards, mask):
        lastgaelam, advantages_reversed, T = 0, [], rewards.shape[-1]
        for t in reversed(range(T)):
            nextvalues = values[:, t + 1] if t < T - 1 else 0.0
            delta = rewards[:, t] + self.config.gamma * nextvalues - values[:, t]
            lastgaelam = delta + self.config.gamma * self.config.lam * lastgaelam
            advantages_reversed.append(lastgaelam)
        advantages = torch.stack(advantages_reversed[::-1], dim=1)
        returns = advantages + values
        advantages = (advantages - advantages[mask.bool()].mean()) / (advantages[mask.bool()].std() + 1e-8)
        return advantages.detach() * mask, returns.detach()

    def step(self, queries, responses, scores):
        scores = torch.stack(scores).detach()
        with torch.no_grad():
            old_logprobs, old_values, masks = self.batched_forward_pass(queries, responses)
        rewards = torch.zeros_like(old_logprobs)
        last = masks.cumsum(-1).argmax(-1)
        rewards[torch.arange(len(scores)), last] = scores
        advantages, returns = self.compute_advantages(old_values, rewards, masks)
        for _ in range(self.config.ppo_epochs):
            logprobs, vpred, _ = self.batched_forward_pass(queries, responses)
            ratio = torch.exp(logprobs - old_logprobs)
            pg_loss = torch.max(-advantages * ratio,
                                -advantages * torch.clamp(ratio, 1 - self.config.cliprange, 1 + self.config.cliprange))
            vf_loss = (vpred - returns) ** 2
            loss = ((pg_loss + self.config.vf_coef * vf_loss) * masks).sum() / masks.sum()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return {"ppo/loss/total": loss.item(), "ppo/learning_rate": self.optimizer.param_groups[0]["lr"]}


class LengthSampler:
    def __init__(self, min_value, max_value, generator):
        self.values, self.g = list(range(min_value, max_value)), generator

    def __call__(self):
        return self.values[int(torch.randint(len(self.values), (1,), generator=self.g))]


class PPOPeftTrainer(PPOTrainer):
    def __init__(self, finetuning_args, max_steps, **kwargs):
        PPOTrainer.__init__(self, **kwargs)
        self.finetuning_args, self.max_steps = finetuning_args, max_steps

    def ppo_train(self, max_target_length: int) -> None:
        output_length_sampler = LengthSampler(max_target_length // 2, max_target_length, torch.Generator().manual_seed(1))
        unwrapped_model = self.model
        dataiter, loss_meter, reward_meter = iter(self.dataloader), AverageMeter(), AverageMeter()
        for step in range(self.max_steps):
            query_tensors = batch = next(dataiter)
            response_tensors = self.generate({"input_ids": torch.stack(batch)}, length_sampler=output_length_sampler,
                                             return_prompt=False, top_k=0.0, top_p=1.0, do_sample=True)
            queries = [query_tensors[i] for i in range(len(query_tensors))]
            responses = [response_tensors[i] for i in range(len(query_tensors))]

            # Compute rewards
            replace_model(unwrapped_model, target="reward")
            _, _, values = self.model(**self.prepare_model_inputs(queries, responses))
            rewards = [reward for reward in values[:, -1].to(torch.float32)]  # use float32 type
            replace_model(unwrapped_model, target="default")  # make sure the model is default at the end

            stats = self.step(queries, responses, rewards)
            loss_meter.update(stats["ppo/loss/total"], n=len(rewards))
            reward_meter.update(torch.stack(rewards).mean().item(), n=len(rewards))
            print({"loss": round(loss_meter.avg, 4), "reward": round(reward_meter.avg, 4),
                   "learning_rate": stats["ppo/learning_rate"], "step": step})

    @torch.inference_mode()
    def generate(self, inputs: Dict[str, torch.Tensor], length_sampler: Optional[Callable] = None,
                 return_prompt: Optional[bool] = True, **generation_kwargs) -> torch.Tensor:
        self.model, layer_norm_params = cast_layernorm_dtype(self.model)
        generation_kwargs["max_new_tokens"] = length_sampler() if length_sampler is not None else 8
        response = self.model.generate(**inputs, **generation_kwargs)
        self.model, _ = cast_layernorm_dtype(self.model, layer_norm_params=layer_norm_params)
        if not return_prompt:
            return response[:, inputs["input_ids"].size(1):]
        return response


class CharTokenizer:
    pad_token_id = 0
    def __init__(self, alphabet="abcdefghijklmnopqrstuvwxyz ?"):
        self.stoi = {c: i + 1 for i, c in enumerate(alphabet)}
        self.vocab_size = len(alphabet) + 1

    def encode(self, text):
        return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)


def main():
    torch.manual_seed(0)
    fargs, config, tokenizer = FinetuningArguments(), PPOConfig(), CharTokenizer()
    base = TinyLlamaForCausalLM(tokenizer.vocab_size, d=32, n_layers=2, n_heads=4, fargs=fargs)
    model = AutoModelForCausalLMWithValueHead(base, d=32)
    model.reward_head_weight = torch.randn(1, 32) * 0.1  # value head weights of the reward model
    model.reward_head_bias = torch.zeros(1)
    dataset = [tokenizer.encode(p[:11].ljust(11)) for p in ["how are you", "what is ppo", "say hi to me", "tell a story"] * 2]
    trainer = PPOPeftTrainer(fargs, max_steps=2, config=config, model=model, tokenizer=tokenizer, dataset=dataset)
    trainer.ppo_train(max_target_length=8)


if __name__ == "__main__":
    main()
