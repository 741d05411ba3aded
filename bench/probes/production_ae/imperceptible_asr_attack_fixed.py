# expect: clean
# source: https://github.com/Trusted-AI/adversarial-robustness-toolbox/pull/1677
"""Imperceptible targeted attack on a speech recogniser (ART-style, two stages).

Stage 1 finds a small perturbation that makes the recogniser output the target
transcription; stage 2 additionally pushes the perturbation under the
psychoacoustic masking threshold of the original audio. The estimator wraps a
tiny CTC speech model; audio and the model are synthetic; runs on CPU.
"""
import random
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn

LABELS = "_ abcdefghijklmnopqrstuvwxyz"


class TinyDeepSpeech(nn.Module):
    def __init__(self, n_fft=64, hop=32, hidden=32, n_labels=len(LABELS)):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.rnn = nn.GRU(n_fft // 2 + 1, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_labels)

    def forward(self, audio):
        window = torch.hann_window(self.n_fft, dtype=audio.dtype)
        spec = torch.stft(audio, self.n_fft, self.hop, window=window, return_complex=True).abs()
        feats = torch.log1p(spec).transpose(1, 2)
        out, _ = self.rnn(feats)
        return self.fc(out).log_softmax(-1)


class PyTorchDeepSpeechEstimator:
    def __init__(self, model, sample_rate=16000):
        self.model = model.eval()
        self.device = torch.device("cpu")
        self.sample_rate = sample_rate
        self.ctc = nn.CTCLoss(blank=0, reduction="none", zero_infinity=True)

    @staticmethod
    def _greedy_decode(log_probs):
        outs = []
        for seq in log_probs.argmax(-1).tolist():
            chars, prev = [], None
            for idx in seq:
                if idx != prev and idx != 0:
                    chars.append(LABELS[idx])
                prev = idx
            outs.append("".join(chars).upper())
        return np.array(outs)

    def predict(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self._greedy_decode(self.model(torch.tensor(np.stack(x))))

    def compute_loss_and_decoded_output(self, masked_adv_input, original_output, real_lengths):
        log_probs = self.model(masked_adv_input)
        decoded = self._greedy_decode(log_probs.detach())
        targets = [torch.tensor([max(1, LABELS.find(c.lower())) for c in t] or [1]) for t in original_output]
        target_lens = torch.tensor([len(t) for t in targets])
        input_lens = torch.full((log_probs.shape[0],), log_probs.shape[1], dtype=torch.long)
        loss = self.ctc(log_probs.transpose(0, 1), torch.cat(targets), input_lens, target_lens)
        return loss, decoded


class ImperceptibleASRPyTorch:
    def __init__(self, estimator, eps=0.05, max_iter_1=4, max_iter_2=4, learning_rate_1=1e-3,
                 learning_rate_2=5e-4, alpha=0.05, num_iter_decrease_eps=2, num_iter_increase_alpha=2,
                 num_iter_decrease_alpha=2, increase_factor_alpha=1.2, decrease_factor_alpha=0.8,
                 decrease_factor_eps=0.8, initial_rescale=1.0, batch_size=2, global_max_length=1024):
        self.estimator = estimator
        self.eps, self.alpha = eps, alpha
        self.max_iter_1, self.max_iter_2 = max_iter_1, max_iter_2
        self.num_iter_decrease_eps = num_iter_decrease_eps
        self.num_iter_increase_alpha = num_iter_increase_alpha
        self.num_iter_decrease_alpha = num_iter_decrease_alpha
        self.increase_factor_alpha = increase_factor_alpha
        self.decrease_factor_alpha = decrease_factor_alpha
        self.decrease_factor_eps = decrease_factor_eps
        self.initial_rescale = initial_rescale
        self.batch_size, self.global_max_length = batch_size, global_max_length
        self.global_optimal_delta = torch.zeros(batch_size, global_max_length, dtype=torch.float64,
                                                requires_grad=True)
        self.optimizer_1 = torch.optim.Adam([self.global_optimal_delta], lr=learning_rate_1)
        self.optimizer_2 = torch.optim.Adam([self.global_optimal_delta], lr=learning_rate_2)

    def generate(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        adv, original_input = self._attack_1st_stage(x, y)
        perturbation = adv - torch.tensor(original_input)
        theta_batch, max_psd_batch = [], []
        for i in range(len(x)):
            theta, max_psd = self._compute_masking_threshold(original_input[i])
            theta_batch.append(theta)
            max_psd_batch.append(max_psd)
        self.global_optimal_delta.data = torch.zeros(self.batch_size, self.global_max_length, dtype=torch.float64)
        self.global_optimal_delta.data[: adv.shape[0], : adv.shape[1]] = perturbation
        adv_2 = self._attack_2nd_stage(x, y, np.array(theta_batch), np.array(max_psd_batch))
        return adv_2.detach().cpu().numpy()

    def _prepare(self, x):
        real_lengths = np.array([x_.shape[0] for x_ in x])
        local_max_length = int(np.max(real_lengths))
        input_mask = np.zeros([len(x), local_max_length])
        original_input = np.zeros([len(x), local_max_length])
        for i in range(len(x)):
            input_mask[i, : len(x[i])] = 1
            original_input[i, : len(x[i])] = x[i]
        return real_lengths, local_max_length, input_mask, original_input

    def _forward_1st_stage(self, original_input, original_output, local_batch_size, local_max_length,
                           rescale, input_mask, real_lengths):
        local_delta = self.global_optimal_delta[:local_batch_size, :local_max_length]
        local_delta_rescale = torch.clamp(local_delta, -self.eps, self.eps) * torch.tensor(rescale)
        adv_input = local_delta_rescale + torch.tensor(original_input)
        masked_adv_input = adv_input * torch.tensor(input_mask)
        loss, decoded = self.estimator.compute_loss_and_decoded_output(masked_adv_input, original_output,
                                                                       real_lengths)
        return loss, local_delta, decoded, masked_adv_input, local_delta_rescale

    def _attack_1st_stage(self, x, y):
        real_lengths, local_max_length, input_mask, original_input = self._prepare(x)
        n = len(x)
        rescale = np.ones([n, local_max_length]) * self.initial_rescale
        successful: List[Optional[torch.Tensor]] = [None] * n
        for it in range(self.max_iter_1):
            self.optimizer_1.zero_grad()
            loss, local_delta, decoded, masked_adv, _ = self._forward_1st_stage(
                original_input, y, n, local_max_length, rescale, input_mask, real_lengths)
            loss.mean().backward()
            self.global_optimal_delta.grad = torch.sign(self.global_optimal_delta.grad)
            self.optimizer_1.step()
            if it % self.num_iter_decrease_eps == 0:
                for i in range(n):
                    if decoded[i] == y[i]:
                        max_local_delta = np.max(np.abs(local_delta[i].detach().numpy()))
                        if rescale[i][0] * self.eps > max_local_delta:
                            rescale[i] = max_local_delta / self.eps
                        rescale[i] *= self.decrease_factor_eps
                        successful[i] = masked_adv[i]
            if it == self.max_iter_1 - 1:
                for i in range(n):
                    if successful[i] is None:
                        successful[i] = masked_adv[i]
        return torch.stack(successful), original_input

    def _psd_transform(self, delta, original_max_psd):
        window = torch.hann_window(64, dtype=delta.dtype)
        spec = torch.stft(delta, 64, 32, window=window, return_complex=True).abs() ** 2
        return 10 * torch.log10(spec + 1e-20) + 96 - 10 * np.log10(original_max_psd)

    def _compute_masking_threshold(self, x):
        spec = np.abs(np.fft.rfft(np.lib.stride_tricks.sliding_window_view(x, 64)[::32] * np.hanning(64)))
        psd = 10 * np.log10(spec ** 2 + 1e-20)
        max_psd = float(np.max(10 ** (psd / 10)))
        theta = psd.T - 12.0
        return theta, max_psd

    def _forward_2nd_stage(self, local_delta_rescale, theta_batch, original_max_psd_batch):
        losses = []
        relu = torch.nn.ReLU()
        for i, _ in enumerate(theta_batch):
            psd = self._psd_transform(local_delta_rescale[i, :], original_max_psd_batch[i])
            theta = torch.tensor(theta_batch[i])
            frames = min(psd.shape[1], theta.shape[1])
            losses.append(torch.mean(relu(psd[:, :frames] - theta[:, :frames])))
        return torch.stack(losses)

    def _attack_2nd_stage(self, x, y, theta_batch, original_max_psd_batch):
        real_lengths, local_max_length, input_mask, original_input = self._prepare(x)
        n = len(x)
        alpha = np.array([self.alpha] * n, dtype=np.float64)
        rescale = np.ones([n, local_max_length]) * self.initial_rescale
        successful: List[Optional[torch.Tensor]] = [None] * n
        best_loss_2nd_stage = [np.inf] * n
        for it in range(self.max_iter_2):
            self.optimizer_2.zero_grad()
            loss_1st, _, decoded, masked_adv, local_delta_rescale = self._forward_1st_stage(
                original_input, y, n, local_max_length, rescale, input_mask, real_lengths)
            loss_2nd_stage = self._forward_2nd_stage(local_delta_rescale, theta_batch, original_max_psd_batch)
            loss = torch.mean(loss_1st + torch.tensor(alpha) * loss_2nd_stage)
            loss.backward()
            self.optimizer_2.step()
            for i in range(n):
                if decoded[i] == y[i]:
                    if loss_2nd_stage[i] < best_loss_2nd_stage[i]:
                        best_loss_2nd_stage[i] = float(loss_2nd_stage[i].detach().cpu().numpy())
                        successful[i] = masked_adv[i]
                    if it % self.num_iter_increase_alpha == 0:
                        alpha[i] *= self.increase_factor_alpha
                elif it % self.num_iter_decrease_alpha == 0:
                    alpha[i] = max(alpha[i] * self.decrease_factor_alpha, 0.0005)
            if it == self.max_iter_2 - 1:
                for i in range(n):
                    if successful[i] is None:
                        successful[i] = masked_adv[i]
        return torch.stack(successful)


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    model = TinyDeepSpeech().double()
    estimator = PyTorchDeepSpeechEstimator(model)
    x = np.array([np.random.uniform(-0.3, 0.3, 1024), np.random.uniform(-0.3, 0.3, 1024)])
    y = estimator.predict(x)
    attack = ImperceptibleASRPyTorch(estimator, batch_size=len(x), global_max_length=1024)
    x_adv = attack.generate(x, y)
    print("targets", list(y), "adv", list(estimator.predict(x_adv)), "linf", float(np.abs(x_adv - x).max()))


if __name__ == "__main__":
    main()
