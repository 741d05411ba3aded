# expect: clean
# source: https://github.com/NVIDIA-NeMo/Speech/issues/2561
"""Text-to-speech "voice swap" demo on a miniature NeMo-style model stack.

A FastPitch-like spectrogram generator (token encoder, duration predictor,
length regulator, mel decoder) is fitted for a few steps on synthetic
(text, mel) pairs with a small Trainer (Adam, Noam-style warmup, checkpoint-free
callbacks).  A HiFi-GAN-like vocoder turns mel frames into waveform samples.
The demo then mirrors the VoiceSwapSample notebook: transcripts are turned back
into audio with `text_to_audio`, normalised and packed into an in-memory WAV.
"""
import io
import math
import wave
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = SimpleNamespace(
    sample_rate=8000, n_mels=20, hop_length=32, d_model=48, n_layers=2,
    train=SimpleNamespace(steps=6, batch_size=4, lr=2e-3, warmup=3, log_every=2),
    vocab=list(" abcdefghijklmnopqrstuvwxyz'.,?"),
)


class CharTokenizer:
    def __init__(self, vocab):
        self.vocab = vocab
        self.stoi = {c: i + 1 for i, c in enumerate(vocab)}

    def __call__(self, text):
        return [self.stoi[c] for c in text.lower() if c in self.stoi]


class ModelPT(nn.Module):
    """Very small stand-in for nemo.core.ModelPT."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    @property
    def device(self):
        return next(self.parameters()).device


class ConvBlock(nn.Module):
    def __init__(self, d, k=3, p_drop=0.1):
        super().__init__()
        self.conv = nn.Conv1d(d, d, k, padding=k // 2)
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(p_drop)

    def forward(self, x):  # x: B x T x D
        y = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.norm(x + self.drop(F.relu(y)))


class FastPitchModel(ModelPT):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.tokenizer = CharTokenizer(cfg.vocab)
        d = cfg.d_model
        self.embed = nn.Embedding(len(cfg.vocab) + 1, d, padding_idx=0)
        self.encoder = nn.Sequential(*[ConvBlock(d) for _ in range(cfg.n_layers)])
        self.duration_predictor = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))
        self.decoder = nn.Sequential(*[ConvBlock(d) for _ in range(cfg.n_layers)])
        self.proj = nn.Linear(d, cfg.n_mels)

    def parse(self, str_input: str) -> torch.Tensor:
        tokens = self.tokenizer(str_input)
        return torch.tensor(tokens, dtype=torch.long, device=self.device).unsqueeze(0)

    @staticmethod
    def regulate_len(durations, enc_out):
        reps = torch.clamp(torch.round(durations), min=1).long()
        out = [torch.repeat_interleave(e, r, dim=0) for e, r in zip(enc_out, reps)]
        return nn.utils.rnn.pad_sequence(out, batch_first=True)

    def forward(self, tokens, durations=None):
        enc = self.encoder(self.embed(tokens))
        log_dur_pred = self.duration_predictor(enc).squeeze(-1)
        dur = durations if durations is not None else torch.exp(log_dur_pred) - 1.0
        len_regulated = self.regulate_len(dur, enc)
        mel = self.proj(self.decoder(len_regulated))
        return mel.transpose(1, 2), log_dur_pred

    def generate_spectrogram(self, tokens: torch.Tensor) -> torch.Tensor:
        spect, _ = self(tokens)
        return spect


class HifiGanModel(ModelPT):
    def __init__(self, cfg):
        super().__init__(cfg)
        ch = 32
        self.conv_pre = nn.Conv1d(cfg.n_mels, ch, 7, padding=3)
        ups = []
        for rate in (4, 4, 2):
            ups.append(nn.ConvTranspose1d(ch, ch // 2, rate * 2, stride=rate, padding=rate // 2))
            ch //= 2
        self.ups = nn.ModuleList(ups)
        self.conv_post = nn.Conv1d(ch, 1, 7, padding=3)

    def convert_spectrogram_to_audio(self, spec: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(spec)
        for up in self.ups:
            x = up(F.leaky_relu(x, 0.1))
        return torch.tanh(self.conv_post(F.leaky_relu(x))).squeeze(1)


def synthetic_batch(cfg, model, generator):
    words = ["hello world", "voice swap", "speech synthesis", "neural codec"]
    texts = [words[int(i)] for i in torch.randint(0, len(words), (cfg.train.batch_size,), generator=generator)]
    tokens = nn.utils.rnn.pad_sequence([torch.tensor(model.tokenizer(t)) for t in texts], batch_first=True)
    durations = (tokens > 0).float() * 2.0
    frames = int(durations.sum(1).max())
    t = torch.arange(frames)[None, :, None].float()
    freqs = torch.arange(1, cfg.n_mels + 1)[None, None, :].float()
    mel = torch.sin(t * freqs / 17.0 + tokens.float().mean(1)[:, None, None]).transpose(1, 2)
    return tokens, durations, mel


class NoamAnnealing:
    def __init__(self, optimizer, d_model, warmup_steps):
        self.optimizer, self.d_model, self.warmup = optimizer, d_model, warmup_steps
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.step_num = 0

    def step(self):
        self.step_num += 1
        s = self.step_num
        mult = min(s ** -0.5, s * self.warmup ** -1.5) * self.warmup ** 0.5
        for g, lr in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = lr * mult


class PrintLossCallback:
    def __init__(self, every):
        self.every = every

    def on_train_batch_end(self, step, logs):
        if step % self.every == 0:
            print("step {} | mel_loss {:.4f} | dur_loss {:.4f}".format(step, logs["mel_loss"], logs["dur_loss"]))


class Trainer:
    def __init__(self, cfg, model, callbacks=()):
        self.cfg, self.model, self.callbacks = cfg, model, list(callbacks)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, betas=(0.9, 0.98))
        self.scheduler = NoamAnnealing(self.optimizer, cfg.d_model, cfg.train.warmup)
        self.g = torch.Generator().manual_seed(3)

    def train_step(self, batch):
        self.model.train()
        tokens, durations, mel = batch
        mel_pred, log_dur_pred = self.model(tokens, durations)
        T = min(mel_pred.shape[-1], mel.shape[-1])
        mel_loss = F.mse_loss(mel_pred[..., :T], mel[..., :T])
        mask = tokens > 0
        dur_loss = F.mse_loss(log_dur_pred[mask], torch.log(durations[mask] + 1.0))
        loss = mel_loss + 0.1 * dur_loss
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return {"mel_loss": mel_loss.item(), "dur_loss": dur_loss.item()}

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        tokens, durations, mel = synthetic_batch(self.cfg, self.model, torch.Generator().manual_seed(9))
        mel_pred, _ = self.model(tokens, durations)
        T = min(mel_pred.shape[-1], mel.shape[-1])
        return F.mse_loss(mel_pred[..., :T], mel[..., :T]).item()

    def fit(self):
        for step in range(1, self.cfg.train.steps + 1):
            logs = self.train_step(synthetic_batch(self.cfg, self.model, self.g))
            for cb in self.callbacks:
                cb.on_train_batch_end(step, logs)
        print("val mel_loss {:.4f}".format(self.evaluate()))


def to_wav_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype(np.int16)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def main():
    torch.manual_seed(0)
    spectrogram_generator = FastPitchModel(CFG)
    vocoder = HifiGanModel(CFG)
    Trainer(CFG, spectrogram_generator, [PrintLossCallback(CFG.train.log_every)]).fit()
    spectrogram_generator.eval()
    vocoder.eval()

    def text_to_audio(text):
        parsed = spectrogram_generator.parse(text)
        spectrogram = spectrogram_generator.generate_spectrogram(tokens=parsed)
        audio = vocoder.convert_spectrogram_to_audio(spec=spectrogram)
        return audio.to('cpu').detach().numpy()

    transcripts = ["well i don't wish to see it any more", "hello world."]
    for text in transcripts:
        audio = text_to_audio(text)[0]
        audio = audio / max(1e-6, float(np.abs(audio).max()))
        wav = to_wav_bytes(audio, CFG.sample_rate)
        rms = math.sqrt(float(np.mean(audio ** 2)))
        print("{!r}: {} samples, rms {:.3f}, wav {} bytes".format(text, audio.shape[0], rms, len(wav)))


if __name__ == "__main__":
    main()
