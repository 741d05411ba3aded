# expect: clean
# source: https://github.com/mindee/doctr/pull/379
from copy import deepcopy
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

VOCAB = "abcdefghijklmnopqrstuvwxyz0123456789"

default_cfgs: Dict[str, Dict[str, Any]] = {
    "sar_tiny": {
        "mean": (0.5, 0.5, 0.5),
        "std": (1.0, 1.0, 1.0),
        "rnn_units": 32,
        "max_length": 8,
        "input_shape": (3, 16, 48),
        "vocab": VOCAB,
    },
}


def tiny_backbone(out_chans: int = 32) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, out_chans, 3, padding=1), nn.BatchNorm2d(out_chans), nn.ReLU(),
        nn.MaxPool2d((2, 1)),
    )


class RecognitionModel:
    vocab: str
    max_length: int

    def compute_target(self, gts: List[str]) -> Tuple[np.ndarray, List[int]]:
        eos = len(self.vocab)
        encoded = np.full((len(gts), self.max_length), eos, dtype=np.int64)
        seq_len = []
        for i, word in enumerate(gts):
            idxs = [self.vocab.index(ch) for ch in word]
            encoded[i, : len(idxs)] = idxs
            seq_len.append(len(idxs))
        return encoded, seq_len


class AttentionModule(nn.Module):
    def __init__(self, feat_chans: int, state_chans: int, attention_units: int) -> None:
        super().__init__()
        self.feat_conv = nn.Conv2d(feat_chans, attention_units, 3, padding=1)
        self.state_conv = nn.Conv2d(state_chans, attention_units, 1, bias=False)
        self.attention_projector = nn.Conv2d(attention_units, 1, 1, bias=False)

    def forward(self, features: torch.Tensor, hidden_state: torch.Tensor) -> torch.Tensor:
        projection = torch.tanh(self.feat_conv(features) + self.state_conv(hidden_state))
        attention = torch.flatten(self.attention_projector(projection), 1)
        attention = torch.softmax(attention, 1).reshape(-1, 1, features.shape[-2], features.shape[-1])
        return (features * attention).sum(dim=(2, 3))


class SARDecoder(nn.Module):
    def __init__(self, rnn_units: int, max_length: int, vocab_size: int, feat_chans: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.lstm_cell = nn.LSTMCell(rnn_units, rnn_units)
        self.embed = nn.Linear(vocab_size + 1, rnn_units, bias=False)
        self.attention_module = AttentionModule(feat_chans, rnn_units, rnn_units)
        self.output_dense = nn.Linear(rnn_units + feat_chans, vocab_size + 1)

    def forward(self, features: torch.Tensor, holistic: torch.Tensor, gt: Optional[torch.Tensor] = None):
        hx = (holistic, torch.zeros_like(holistic))
        symbol = torch.zeros((features.shape[0], self.vocab_size + 1), dtype=features.dtype)
        logits_list = []
        for t in range(self.max_length):
            hx = self.lstm_cell(self.embed(symbol), hx)
            glimpse = self.attention_module(features, hx[0].unsqueeze(-1).unsqueeze(-1))
            logits = self.output_dense(torch.cat([hx[0], glimpse], 1))
            _symbol = gt[:, t] if gt is not None else logits.argmax(-1)
            symbol = F.one_hot(_symbol, self.vocab_size + 1).to(dtype=features.dtype)
            logits_list.append(logits)
        return torch.stack(logits_list, 1)


class SAR(nn.Module, RecognitionModel):
    def __init__(self, feature_extractor, vocab: str, rnn_units: int = 32, max_length: int = 8,
                 cfg: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.vocab = vocab
        self.cfg = cfg
        self.max_length = max_length + 1
        self.feat_extractor = feature_extractor
        self.encoder = nn.LSTM(32 * 4, rnn_units, 1, batch_first=True)
        self.decoder = SARDecoder(rnn_units, self.max_length, len(vocab), 32)

    def forward(self, x: torch.Tensor, target: Optional[List[str]] = None) -> Dict[str, Any]:
        features = self.feat_extractor(x)
        seq = features.permute(0, 3, 1, 2).flatten(2)
        _, (encoded, _) = self.encoder(seq)
        encoded = encoded[-1]
        gt, seq_len = None, None
        if target is not None:
            _gt, _seq_len = self.compute_target(target)
            gt, seq_len = torch.from_numpy(_gt).to(dtype=torch.long), torch.tensor(_seq_len)
        decoded_features = self.decoder(features, encoded, gt=gt)

        out: Dict[str, Any] = {"out_map": decoded_features}
        if target is not None:
            out["loss"] = self.compute_loss(decoded_features, gt, seq_len)
        return out

    def compute_loss(self, model_output: torch.Tensor, gt: torch.Tensor, seq_len: torch.Tensor) -> torch.Tensor:
        input_len = model_output.shape[1]
        seq_len = seq_len + 1
        cce = F.cross_entropy(model_output.permute(0, 2, 1), gt, reduction="none")
        mask_2d = torch.arange(input_len)[None, :] >= seq_len[:, None]
        cce[mask_2d] = 0

        ce_loss = cce.sum(1) / seq_len.to(dtype=model_output.dtype)
        return ce_loss.mean()


def sar_tiny(**kwargs: Any) -> SAR:
    _cfg = deepcopy(default_cfgs["sar_tiny"])
    _cfg["vocab"] = kwargs.get("vocab", _cfg["vocab"])
    return SAR(tiny_backbone(32), vocab=_cfg["vocab"], rnn_units=_cfg["rnn_units"],
               max_length=_cfg["max_length"], cfg=_cfg)


def synthetic_words(rng: np.random.Generator, n: int, max_len: int) -> List[str]:
    words = []
    for _ in range(n):
        length = int(rng.integers(2, max_len + 1))
        words.append("".join(rng.choice(list(VOCAB), size=length)))
    return words


def fit_one_epoch(model: SAR, optimizer, batches) -> float:
    model.train()
    running = []
    for images, targets in batches:
        optimizer.zero_grad()
        train_loss = model(images, targets)["loss"]
        train_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        running.append(train_loss.item())
    return float(np.mean(running))


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = sar_tiny()
    cfg = model.cfg
    mean = torch.tensor(cfg["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"]).view(1, 3, 1, 1)
    c, h, w = cfg["input_shape"]
    batches = []
    for _ in range(3):
        imgs = (torch.rand(4, c, h, w) - mean) / std
        batches.append((imgs, synthetic_words(rng, 4, cfg["max_length"])))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        print(f"epoch {epoch}: loss={fit_one_epoch(model, optimizer, batches):.4f}")


if __name__ == "__main__":
    main()
