# expect: grad_unused
# source: https://github.com/speechbrain/speechbrain/issues/1396
# Gradient of the CTC loss w.r.t. the input waveform (for an uncertainty
# baseline), using a small CRDNN-style recipe class.
from enum import Enum, auto
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Stage(Enum):
    TRAIN = auto()
    VALID = auto()


class ASR:
    def __init__(self, n_fft=64, n_mels=20, n_tokens=12):
        window = torch.hann_window(n_fft)
        self.hparams = SimpleNamespace(n_fft=n_fft, hop=32, window=window, blank_index=0)
        self.mel_fb = torch.rand(n_fft // 2 + 1, n_mels)
        self.modules = nn.ModuleDict({
            "enc": nn.GRU(n_mels, 32, batch_first=True, bidirectional=True),
            "ctc_lin": nn.Linear(64, n_tokens),
        })

    def compute_features(self, wavs):
        spec = torch.stft(wavs, self.hparams.n_fft, self.hparams.hop, window=self.hparams.window,
                          return_complex=True).abs().pow(2)
        return torch.log(spec.transpose(1, 2) @ self.mel_fb + 1e-6)

    def compute_forward(self, batch, stage):
        wavs, wav_lens = batch.sig
        feats = self.compute_features(wavs)
        feats = (feats - feats.mean(1, keepdim=True)) / (feats.std(1, keepdim=True) + 1e-5)
        # Running the encoder (prevent propagation to feature extraction)
        x, _ = self.modules.enc(feats.detach())
        p_ctc = F.log_softmax(self.modules.ctc_lin(x), dim=-1)
        return p_ctc, wav_lens

    def compute_objectives(self, predictions, batch, stage):
        p_ctc, wav_lens = predictions
        tokens, token_lens = batch.tokens
        input_lens = torch.round(wav_lens * p_ctc.shape[1]).long()
        return F.ctc_loss(p_ctc.transpose(0, 1), tokens, input_lens, token_lens,
                          blank=self.hparams.blank_index, zero_infinity=True)


asr = ASR()
wavs = torch.randn(4, 4000) * 0.1
wav_lens = torch.tensor([1.0, 0.9, 0.8, 1.0])
tokens = torch.randint(1, 12, (4, 6))
batch = SimpleNamespace(sig=(wavs, wav_lens), tokens=(tokens, torch.tensor([6, 5, 6, 4])))

wavs.requires_grad_(True)
p_seq = asr.compute_forward(batch, Stage.TRAIN)
loss = asr.compute_objectives(p_seq, batch, stage=Stage.TRAIN)
print(loss)
grad_wav, = torch.autograd.grad(loss, wavs, retain_graph=True)  # raises
saliency = grad_wav.abs().mean(1)
print("per-utterance input-gradient magnitude:", saliency.tolist())
