# expect: clean
# source: https://github.com/MorvanZhou/PyTorch-Tutorial/issues/57
"""
Streaming CTC acoustic model trained with truncated BPTT.

Each utterance is cut into fixed-size chunks; the LSTM state is carried from
one chunk to the next so the model sees the whole utterance, but gradients are
only propagated inside a chunk.
"""
import logging
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

log = logging.getLogger("asr.stream")

CFG = SimpleNamespace(
    feats=SimpleNamespace(n_mels=20, chunk_frames=16, utt_chunks=3),
    model=SimpleNamespace(hidden=48, layers=2, vocab=12, dropout=0.1),
    optim=SimpleNamespace(lr=1e-3, clip=5.0, betas=(0.9, 0.98)),
    train=SimpleNamespace(batch=4, utterances=3, log_every=1, labels_per_chunk=3),
)
BLANK = 0


class StreamingEncoder(nn.Module):
    """Conv front-end + unidirectional LSTM; keeps its recurrent state between calls."""

    def __init__(self, n_mels, hidden, layers, vocab, dropout):
        super().__init__()
        self.frontend = nn.Sequential(
            nn.Conv1d(n_mels, hidden, kernel_size=3, padding=1),
            nn.GELU(),
        )
        self.rnn = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True, dropout=dropout)
        self.proj = nn.Linear(hidden, vocab)
        self._state = None

    def reset_state(self):
        self._state = None

    @property
    def has_state(self):
        return self._state is not None

    def _carry(self, state):
        # keep the last hidden/cell state so the next chunk continues the utterance,
        # but cut the graph: truncated BPTT stops at the chunk boundary
        return tuple(s.detach() for s in state)

    def forward(self, feats):
        # feats: (B, T, n_mels)
        x = self.frontend(feats.transpose(1, 2)).transpose(1, 2)
        out, state = self.rnn(x, self._state)
        self._state = self._carry(state)
        return self.proj(out)


class ActivationMonitor:
    """Forward hook that records the RMS of the LSTM outputs for logging."""

    def __init__(self):
        self.last_rms = None

    def __call__(self, module, inputs, output):
        out = output[0] if isinstance(output, tuple) else output
        self.last_rms = out.detach().pow(2).mean().sqrt().item()


class ChunkedCTCTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        m = cfg.model
        self.model = StreamingEncoder(cfg.feats.n_mels, m.hidden, m.layers, m.vocab, m.dropout)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas)
        self.ctc = nn.CTCLoss(blank=BLANK, zero_infinity=True)
        self.monitor = ActivationMonitor()
        self.model.rnn.register_forward_hook(self.monitor)
        self.global_step = 0

    def synth_utterance(self):
        """Random log-mel features and per-chunk label sequences."""
        c = self.cfg
        B, T = c.train.batch, c.feats.chunk_frames * c.feats.utt_chunks
        feats = torch.randn(B, T, c.feats.n_mels)
        labels = torch.randint(1, c.model.vocab, (c.feats.utt_chunks, B, c.train.labels_per_chunk))
        return feats, labels

    def iter_chunks(self, feats, labels):
        size = self.cfg.feats.chunk_frames
        for i in range(labels.shape[0]):
            yield feats[:, i * size:(i + 1) * size], labels[i]

    def chunk_loss(self, chunk, targets):
        logits = self.model(chunk)  # (B, T, V)
        log_probs = F.log_softmax(logits, dim=-1).transpose(0, 1)  # (T, B, V)
        B, T = chunk.shape[0], chunk.shape[1]
        input_lengths = torch.full((B,), T, dtype=torch.long)
        target_lengths = torch.full((B,), targets.shape[1], dtype=torch.long)
        return self.ctc(log_probs, targets, input_lengths, target_lengths)

    def train_utterance(self, feats, labels):
        self.model.train()
        self.model.reset_state()
        total = 0.0
        for chunk, targets in self.iter_chunks(feats, labels):
            loss = self.chunk_loss(chunk, targets)
            self.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.clip)
            self.optimizer.step()
            total += loss.item()
            self.global_step += 1
            if self.global_step % self.cfg.train.log_every == 0:
                log.info("step %d ctc %.3f lstm_rms %.3f", self.global_step, loss.item(), self.monitor.last_rms)
        return total / labels.shape[0]

    @torch.no_grad()
    def greedy_decode(self, feats):
        self.model.eval()
        self.model.reset_state()
        best = self.model(feats).argmax(-1)
        hyps = []
        for seq in best.tolist():
            out, prev = [], BLANK
            for tok in seq:
                if tok != prev and tok != BLANK:
                    out.append(tok)
                prev = tok
            hyps.append(out)
        return hyps

    def fit(self):
        for utt in range(self.cfg.train.utterances):
            feats, labels = self.synth_utterance()
            avg = self.train_utterance(feats, labels)
            log.info("utterance %d avg ctc %.3f", utt, avg)
        feats, _ = self.synth_utterance()
        log.info("sample hypothesis: %s", self.greedy_decode(feats)[0])


def main():
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    torch.manual_seed(1234)
    ChunkedCTCTrainer(CFG).fit()


if __name__ == "__main__":
    main()
