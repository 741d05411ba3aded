# expect: clean
# source: https://github.com/mindee/doctr/pull/379
import argparse
import random
import string
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

VOCABS = {'digits': string.digits, 'ascii_letters': string.ascii_letters}
VOCABS['legacy_mini'] = VOCABS['digits'] + VOCABS['ascii_letters'][:26]


def encode_sequences(sequences: List[str], vocab: str, target_size: int, eos: int) -> np.ndarray:
    encoded = np.full([len(sequences), target_size], eos, dtype=np.int32)
    for idx, seq in enumerate(sequences):
        encoded_seq = [vocab.index(char) for char in seq]
        encoded[idx, :min(len(encoded_seq), target_size)] = encoded_seq[:target_size]
    return encoded


class RecognitionModel:
    vocab: str
    max_length: int

    def compute_target(self, gts: List[str]) -> Tuple[np.ndarray, List[int]]:
        encoded = encode_sequences(sequences=gts, vocab=self.vocab, target_size=self.max_length, eos=len(self.vocab))
        seq_len = [len(word) for word in gts]
        return encoded, seq_len


class AttentionModule(nn.Module):
    def __init__(self, feat_chans: int, state_chans: int, attention_units: int) -> None:
        super().__init__()
        self.feat_conv = nn.Conv2d(feat_chans, attention_units, 3, padding=1)
        self.state_conv = nn.Conv2d(state_chans, attention_units, 1, bias=False)
        self.attention_projector = nn.Conv2d(attention_units, 1, 1, bias=False)

    def forward(self, features: torch.Tensor, hidden_state: torch.Tensor) -> torch.Tensor:
        feat_projection = self.feat_conv(features)
        state_projection = self.state_conv(hidden_state)
        projection = torch.tanh(feat_projection + state_projection)
        attention = torch.flatten(self.attention_projector(projection), 1)
        attention = torch.softmax(attention, 1).reshape(-1, 1, features.shape[-2], features.shape[-1])
        return (features * attention).sum(dim=(2, 3))


class SARDecoder(nn.Module):
    def __init__(self, rnn_units: int, max_length: int, vocab_size: int, embedding_units: int,
                 attention_units: int, num_decoder_layers: int = 2, feat_chans: int = 64) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.lstm_cells = nn.ModuleList([nn.LSTMCell(rnn_units, rnn_units) for _ in range(num_decoder_layers)])
        self.embed = nn.Linear(self.vocab_size + 1, embedding_units, bias=False)
        self.attention_module = AttentionModule(feat_chans, rnn_units, attention_units)
        self.output_dense = nn.Linear(rnn_units + feat_chans, vocab_size + 1)
        self.max_length = max_length

    def forward(self, features: torch.Tensor, holistic: torch.Tensor, gt: Optional[torch.Tensor] = None) -> torch.Tensor:
        hx = [None, None]
        symbol = torch.zeros((features.shape[0], self.vocab_size + 1), device=features.device, dtype=features.dtype)
        logits_list = []
        for t in range(self.max_length + 1):  # keep 1 step for <eos>
            embeded_symbol = self.embed(symbol)
            hx[0] = self.lstm_cells[0](embeded_symbol, hx[0])
            hx[1] = self.lstm_cells[1](hx[0][0], hx[1])
            logits, _ = hx[1]
            glimpse = self.attention_module(features, logits.unsqueeze(-1).unsqueeze(-1))
            logits = self.output_dense(torch.cat([logits, glimpse], 1))
            _symbol = gt[:, t] if gt is not None else logits.argmax(-1)
            symbol = F.one_hot(_symbol, self.vocab_size + 1).to(dtype=features.dtype)
            logits_list.append(logits)
        return torch.stack(logits_list, 1)  # shape (N, max_length + 1, vocab_size + 1)


class SARPostProcessor:
    def __init__(self, vocab: str) -> None:
        self._embedding = list(vocab) + ['<eos>']

    def __call__(self, logits: torch.Tensor) -> List[Tuple[str, float]]:
        out_idxs = logits.argmax(-1)
        probs = torch.gather(torch.softmax(logits, -1), -1, out_idxs.unsqueeze(-1)).squeeze(-1)
        probs = probs.min(dim=1).values.detach().cpu()
        word_values = [''.join(self._embedding[idx] for idx in encoded_seq).split("<eos>")[0]
                       for encoded_seq in out_idxs.detach().cpu().numpy()]
        return list(zip(word_values, probs.numpy().tolist()))


class SAR(nn.Module, RecognitionModel):
    def __init__(self, feature_extractor, vocab: str, rnn_units: int = 32, embedding_units: int = 32,
                 attention_units: int = 32, max_length: int = 8, num_decoders: int = 2, feat_chans: int = 64,
                 dropout_prob: float = 0., cfg: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        self.vocab = vocab
        self.cfg = cfg
        self.max_length = max_length + 1  # Add 1 timestep for EOS after the longest word
        self.feat_extractor = feature_extractor
        self.encoder = nn.LSTM(32, rnn_units, 2, batch_first=True, dropout=dropout_prob)
        self.decoder = SARDecoder(rnn_units, max_length, len(vocab), embedding_units, attention_units,
                                  num_decoders, feat_chans)
        self.postprocessor = SARPostProcessor(vocab=vocab)

    def forward(self, x: torch.Tensor, target: Optional[List[str]] = None,
                return_model_output: bool = False, return_preds: bool = False) -> Dict[str, Any]:
        features = self.feat_extractor(x)
        pooled_features = features.max(dim=-2).values  # vertical max pooling
        _, (encoded, _) = self.encoder(pooled_features)
        encoded = encoded[-1]
        if target is not None:
            _gt, _seq_len = self.compute_target(target)
            gt, seq_len = torch.from_numpy(_gt).to(dtype=torch.long), torch.tensor(_seq_len)
        decoded_features = self.decoder(features, encoded, gt=None if target is None else gt)
        out: Dict[str, Any] = {}
        if return_model_output:
            out["out_map"] = decoded_features
        if target is None or return_preds:
            out["preds"] = self.postprocessor(decoded_features)
        if target is not None:
            out['loss'] = self.compute_loss(decoded_features, gt, seq_len)
        return out

    def compute_loss(self, model_output: torch.Tensor, gt: torch.Tensor, seq_len: torch.Tensor) -> torch.Tensor:
        """Compute categorical cross-entropy loss for the model.
        Sequences are masked after the EOS character.
        """
        input_len = model_output.shape[1]
        # Add one for additional <eos> token
        seq_len = seq_len + 1
        cce = F.cross_entropy(model_output.permute(0, 2, 1), gt, reduction='none')
        mask_2d = torch.arange(input_len, device=model_output.device)[None, :] >= seq_len[:, None]
        cce[mask_2d] = 0
        ce_loss = cce.sum(1) / seq_len.to(dtype=model_output.dtype)
        return ce_loss.mean()


def mini_backbone(feat_chans: int = 64) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(32, feat_chans, 3, padding=1), nn.BatchNorm2d(feat_chans), nn.ReLU(inplace=True),
    )


def make_samples(n: int, vocab: str, max_len: int, seed: int) -> Tuple[torch.Tensor, List[str]]:
    rng = random.Random(seed)
    words = [''.join(rng.choice(vocab) for _ in range(rng.randint(2, max_len))) for _ in range(n)]
    images = torch.rand(n, 3, 16, 64, generator=torch.Generator().manual_seed(seed))
    return images, words


def fit_one_epoch(model, train_set, batch_size, optimizer, scheduler):
    model.train()
    images, targets = train_set
    for i in range(0, images.shape[0], batch_size):
        train_loss = model(images[i:i + batch_size], targets[i:i + batch_size])['loss']
        optimizer.zero_grad()
        train_loss.backward()
        optimizer.step()
        scheduler.step()


@torch.no_grad()
def evaluate(model, val_set, batch_size):
    model.eval()
    images, targets = val_set
    val_loss, batch_cnt, exact = 0., 0, 0
    for i in range(0, images.shape[0], batch_size):
        out = model(images[i:i + batch_size], targets[i:i + batch_size], return_preds=True)
        val_loss += out['loss'].item()
        exact += sum(pred == gt for (pred, _), gt in zip(out['preds'], targets[i:i + batch_size]))
        batch_cnt += 1
    return val_loss / batch_cnt, exact / images.shape[0]


def main(args):
    torch.manual_seed(args.seed)
    vocab = VOCABS[args.vocab]
    model = SAR(mini_backbone(64), vocab=vocab, max_length=args.max_length)
    train_set = make_samples(32, vocab, args.max_length, seed=1)
    val_set = make_samples(16, vocab, args.max_length, seed=2)
    optimizer = torch.optim.Adam(model.parameters(), args.lr, betas=(0.95, 0.99), eps=1e-6, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.epochs * 4)
    for epoch in range(args.epochs):
        fit_one_epoch(model, train_set, args.batch_size, optimizer, scheduler)
        val_loss, exact_match = evaluate(model, val_set, args.batch_size)
        print(f"Epoch {epoch + 1}/{args.epochs} - Validation loss: {val_loss:.6} (Exact: {exact_match:.2%})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description='DocTR train text-recognition model (PyTorch)')
    parser.add_argument('--vocab', type=str, default='legacy_mini')
    parser.add_argument('--max_length', type=int, default=8)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('-b', '--batch_size', type=int, default=8)
    parser.add_argument('--lr', type=float, default=1e-3)
    parser.add_argument('--weight_decay', type=float, default=0)
    parser.add_argument('--seed', type=int, default=0)
    main(parser.parse_args())
