# expect: freed_graph
# source: https://github.com/pytorch/pytorch/issues/33618
"""Magnitude pruning of an LSTM speech-enhancement mask estimator.

The dense model is trained on synthetic noisy speech, its recurrent input
weights are L1-pruned, the pruning re-parametrization is made permanent, and
the sparse model is fine-tuned before export. The pruning helpers mirror
torch.nn.utils.prune (v1.4) so that they can be used on older runtimes.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


@dataclass
class Config:
    sample_rate: int = 8000
    n_fft: int = 256
    hop: int = 128
    hidden: int = 64
    layers: int = 2
    lr: float = 2e-3
    dense_steps: int = 12
    finetune_steps: int = 8
    batch_size: int = 6
    amount: float = 0.5


# ---------------------------------------------------------------- pruning utils
class L1Unstructured:
    """Prune the `amount` smallest-magnitude entries of a tensor (forward-pre-hook
    re-parametrization: name_orig parameter * name_mask buffer)."""

    def __init__(self, name, amount):
        self._tensor_name = name
        self.amount = amount

    def compute_mask(self, t, default_mask):
        k = int(round(self.amount * t.nelement()))
        mask = default_mask.clone()
        if k > 0:
            idx = torch.topk(t.abs().view(-1), k=k, largest=False).indices
            mask.view(-1)[idx] = 0
        return mask

    def apply_mask(self, module):
        orig = getattr(module, self._tensor_name + "_orig")
        mask = getattr(module, self._tensor_name + "_mask")
        return orig * mask.to(dtype=orig.dtype)

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    @classmethod
    def apply(cls, module, name, amount):
        method = cls(name, amount)
        orig = getattr(module, name)
        module.register_parameter(name + "_orig", orig)
        del module._parameters[name]
        mask = method.compute_mask(orig.detach(), default_mask=torch.ones_like(orig))
        module.register_buffer(name + "_mask", mask)
        setattr(module, name, method.apply_mask(module))
        module.register_forward_pre_hook(method)
        return method

    def remove(self, module):
        weight = self.apply_mask(module)
        delattr(module, self._tensor_name)
        orig = module._parameters[self._tensor_name + "_orig"]
        orig.data = weight.data
        del module._parameters[self._tensor_name + "_orig"]
        del module._buffers[self._tensor_name + "_mask"]
        module.register_parameter(self._tensor_name, orig)


def l1_unstructured(module, name, amount):
    L1Unstructured.apply(module, name, amount)
    return module


def remove(module, name):
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, L1Unstructured) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")


def sparsity(t):
    return float((t == 0).sum()) / t.nelement()


# ---------------------------------------------------------------- model / data
class LSTMMaskEstimator(nn.Module):
    def __init__(self, n_freq, hidden, layers):
        super().__init__()
        self.input_norm = nn.LayerNorm(n_freq)
        self.lstm = nn.LSTM(n_freq, hidden, num_layers=layers, batch_first=True)
        self.proj = nn.Linear(hidden, n_freq)

    def forward(self, log_mag):
        h, _ = self.lstm(self.input_norm(log_mag))
        return torch.sigmoid(self.proj(h))


class Frontend:
    def __init__(self, cfg):
        self.cfg = cfg
        self.window = torch.hann_window(cfg.n_fft)

    def stft(self, wav):
        return torch.stft(wav, self.cfg.n_fft, self.cfg.hop, window=self.window, return_complex=True).transpose(1, 2)

    def istft(self, spec, length):
        return torch.istft(spec.transpose(1, 2), self.cfg.n_fft, self.cfg.hop, window=self.window, length=length)


def synth_batch(cfg, rng, seconds=0.5):
    n = int(cfg.sample_rate * seconds)
    t = np.arange(n) / cfg.sample_rate
    clean, noisy = [], []
    for _ in range(cfg.batch_size):
        f0 = rng.uniform(100, 250)
        env = 0.5 + 0.5 * np.sin(2 * math.pi * rng.uniform(2, 5) * t)
        s = sum(np.sin(2 * math.pi * f0 * h * t) / h for h in range(1, 6)) * env
        noise = rng.randn(n) * rng.uniform(0.3, 0.8)
        clean.append(s)
        noisy.append(s + noise)
    to_t = lambda a: torch.tensor(np.stack(a), dtype=torch.float32)
    return to_t(clean), to_t(noisy)


def snr_db(ref, est):
    return 10 * torch.log10(ref.pow(2).sum(-1) / (ref - est).pow(2).sum(-1).clamp_min(1e-8)).mean().item()


class EnhancementTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.frontend = Frontend(cfg)
        self.model = LSTMMaskEstimator(cfg.n_fft // 2 + 1, cfg.hidden, cfg.layers)
        self.rng = np.random.RandomState(0)
        self.build_optimizer(cfg.lr)

    def build_optimizer(self, lr):
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=6, gamma=0.5)

    def loss_fn(self, clean, noisy):
        noisy_spec = self.frontend.stft(noisy)
        clean_mag = self.frontend.stft(clean).abs()
        mask = self.model(torch.log1p(noisy_spec.abs()))
        return F.mse_loss(torch.log1p(mask * noisy_spec.abs()), torch.log1p(clean_mag))

    def train_steps(self, n_steps, tag):
        self.model.train()
        for step in range(n_steps):
            clean, noisy = synth_batch(self.cfg, self.rng)
            loss = self.loss_fn(clean, noisy)
            self.optimizer.zero_grad()
            loss.backward()  # raises
            nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
            self.optimizer.step()
            self.scheduler.step()
        print(f"[{tag}] last loss {loss.item():.4f}")

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        clean, noisy = synth_batch(self.cfg, np.random.RandomState(123))
        spec = self.frontend.stft(noisy)
        mask = self.model(torch.log1p(spec.abs()))
        enhanced = self.frontend.istft(mask * spec, clean.shape[-1])
        return snr_db(clean, noisy), snr_db(clean, enhanced)

    def prune(self, amount):
        names = [f"weight_ih_l{k}" for k in range(self.cfg.layers)]
        for name in names:
            l1_unstructured(self.model.lstm, name, amount)
        # bake the masks into the weights before export / sparse fine-tuning
        for name in names:
            remove(self.model.lstm, name)
        self.build_optimizer(self.cfg.lr * 0.5)
        return {name: sparsity(getattr(self.model.lstm, name)) for name in names}


def main():
    cfg = Config()
    trainer = EnhancementTrainer(cfg)
    trainer.train_steps(cfg.dense_steps, "dense")
    before, after = trainer.evaluate()
    print(f"dense: input SNR {before:.2f} dB -> enhanced {after:.2f} dB")
    print("sparsity:", trainer.prune(cfg.amount))
    trainer.train_steps(cfg.finetune_steps, "sparse fine-tune")
    before, after = trainer.evaluate()
    print(f"pruned: input SNR {before:.2f} dB -> enhanced {after:.2f} dB")


main()
