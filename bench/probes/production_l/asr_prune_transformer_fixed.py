# expect: clean
# source: https://github.com/speechbrain/speechbrain/issues/1160
"""Recipe for pruning a pre-trained Transformer ASR model (CTC + attention).

A small Brain-style trainer: the model is pruned once with global magnitude
pruning before fine-tuning, then trained for a couple of epochs so that the
remaining weights can recover.  Data is synthetic (fbank-like features and
random token targets).
"""
import logging
import math
from enum import Enum, auto
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune

logger = logging.getLogger(__name__)
torch.manual_seed(1234)
np.random.seed(1234)


class Stage(Enum):
    TRAIN = auto()
    VALID = auto()
    TEST = auto()


# ---------------------------------------------------------------- modules
class ConvolutionFrontEnd(nn.Module):
    def __init__(self, n_mels=40, channels=8, d_model=32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=(2, 1), padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(1, 1), padding=1)
        self.proj = nn.Linear(channels * n_mels, d_model)

    def forward(self, x):
        x = x.unsqueeze(1)
        x = F.leaky_relu(self.conv1(x))
        x = F.leaky_relu(self.conv2(x))
        b, c, t, f = x.shape
        return self.proj(x.transpose(1, 2).reshape(b, t, c * f))


class MultiheadAttention(nn.Module):
    """Thin wrapper around torch's MultiheadAttention (batch-first in, time-first inside)."""

    def __init__(self, nhead, d_model, dropout=0.0):
        super().__init__()
        self.att = nn.MultiheadAttention(d_model, nhead, dropout=dropout)

    def forward(self, query, key, value, key_padding_mask=None):
        q, k, v = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        out, attn = self.att(q, k, v, key_padding_mask=key_padding_mask)
        return out.transpose(0, 1), attn


class PositionalwiseFeedForward(nn.Module):
    def __init__(self, d_ffn, input_size, dropout=0.0):
        super().__init__()
        self.ffn = nn.Sequential(nn.Linear(input_size, d_ffn), nn.ReLU(),
                                 nn.Dropout(dropout), nn.Linear(d_ffn, input_size))

    def forward(self, x):
        return self.ffn(x)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_ffn, nhead, d_model, dropout=0.0):
        super().__init__()
        self.self_att = MultiheadAttention(nhead, d_model, dropout)
        self.pos_ffn = PositionalwiseFeedForward(d_ffn, d_model, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, src, src_key_padding_mask=None):
        out, attn = self.self_att(src, src, src, key_padding_mask=src_key_padding_mask)
        src = self.norm1(src + out)
        src = self.norm2(src + self.pos_ffn(src))
        return src, attn


class TransformerEncoder(nn.Module):
    def __init__(self, num_layers, nhead, d_ffn, d_model):
        super().__init__()
        self.layers = nn.ModuleList(
            [TransformerEncoderLayer(d_ffn, nhead, d_model) for _ in range(num_layers)])

    def forward(self, src):
        for layer in self.layers:
            src, _ = layer(src)
        return src


class TransformerASR(nn.Module):
    def __init__(self, d_model, nhead, num_encoder_layers, d_ffn, max_len=256):
        super().__init__()
        self.encoder = TransformerEncoder(num_encoder_layers, nhead, d_ffn, d_model)
        pe = torch.zeros(max_len, d_model)
        pos = torch.arange(max_len).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def encode(self, src):
        src = src + self.pe[: src.size(1)]
        return self.encoder(src)


# ---------------------------------------------------------------- brain
class Brain:
    def __init__(self, modules, opt_class, hparams, run_opts=None):
        self.modules = nn.ModuleDict(modules)
        self.opt_class = opt_class
        self.hparams = SimpleNamespace(**hparams)
        self.device = (run_opts or {}).get("device", "cpu")
        self.optimizer = None
        self.step = 0

    def init_optimizers(self):
        self.optimizer = self.opt_class(self.modules.parameters())

    def fit_batch(self, batch):
        outputs = self.compute_forward(batch, Stage.TRAIN)
        loss = self.compute_objectives(outputs, batch, Stage.TRAIN)
        loss.backward()
        if self.check_gradients(loss):
            self.optimizer.step()
        self.optimizer.zero_grad()
        return loss.detach()

    def check_gradients(self, loss):
        if not torch.isfinite(loss):
            logger.warning("Loss is not finite, skipping step")
            return False
        torch.nn.utils.clip_grad_norm_(self.modules.parameters(), self.hparams.max_grad_norm)
        return True

    @torch.no_grad()
    def evaluate_batch(self, batch, stage):
        outputs = self.compute_forward(batch, stage)
        return self.compute_objectives(outputs, batch, stage).detach()

    def fit(self, epoch_counter, train_set, valid_set):
        if self.optimizer is None:
            self.init_optimizers()
        for epoch in epoch_counter:
            self.modules.train()
            avg = 0.0
            for i, batch in enumerate(train_set, start=1):
                self.step += 1
                loss = self.fit_batch(batch)
                avg += (loss.item() - avg) / i
            self.modules.eval()
            valid = np.mean([self.evaluate_batch(b, Stage.VALID).item() for b in valid_set])
            print(f"epoch {epoch}: train loss {avg:.3f} valid loss {valid:.3f}")


def count_prunable(modules):
    total, zeros = 0, 0
    for m in modules:
        for name, buf in m.named_buffers():
            if name.endswith("_mask"):
                total += buf.numel()
                zeros += int((buf == 0).sum())
    return total, zeros


def print_remain_weight(modules):
    all_count, zero_count = count_prunable(modules)
    remain_weight = 100.0 * (all_count - zero_count) / max(all_count, 1)
    logger.info("* Total Prunable = %d, remain weight percentage = %.4f%%", all_count, remain_weight)
    return remain_weight


class ASR(Brain):
    def prune_model(self, px):
        # Note that we only prune CNN and Transformer layers,
        # we do not prune ctc_lin and seq_lin layers since they are output layers
        parameters_to_prune = []
        for m in self.modules.CNN.modules():
            if isinstance(m, nn.Conv2d):
                parameters_to_prune.append((m, "weight"))
        for i in range(self.hparams.num_encoder_layers):
            layer = self.modules.Transformer.encoder.layers[i]
            parameters_to_prune.append((layer.self_att.att, "in_proj_weight"))
            # out_proj is applied inside F.multi_head_attention_forward, so its own
            # forward (and the pruning pre-hook) never runs; leave it unpruned.
            parameters_to_prune.append((layer.pos_ffn.ffn[0], "weight"))
            parameters_to_prune.append((layer.pos_ffn.ffn[3], "weight"))
        prune.global_unstructured(parameters_to_prune,
                                  pruning_method=prune.L1Unstructured, amount=px)
        return print_remain_weight(self.modules.modules())

    def compute_forward(self, batch, stage):
        feats, wav_lens, tokens, token_lens = batch
        feats = (feats - feats.mean(dim=1, keepdim=True)) / (feats.std(dim=1, keepdim=True) + 1e-5)
        src = self.modules.CNN(feats)
        enc_out = self.modules.Transformer.encode(src)
        p_ctc = F.log_softmax(self.modules.ctc_lin(enc_out), dim=-1)
        p_seq = F.log_softmax(self.modules.seq_lin(enc_out.mean(dim=1, keepdim=True)
                                                   + self.modules.tok_emb(tokens)), dim=-1)
        return p_ctc, p_seq, wav_lens

    def compute_objectives(self, predictions, batch, stage):
        p_ctc, p_seq, wav_lens = predictions
        _, _, tokens, token_lens = batch
        in_lens = torch.full((p_ctc.size(0),), p_ctc.size(1), dtype=torch.long)
        loss_ctc = F.ctc_loss(p_ctc.transpose(0, 1), tokens, in_lens, token_lens,
                              blank=self.hparams.blank_index, zero_infinity=True)
        loss_seq = F.nll_loss(p_seq[:, :-1].reshape(-1, p_seq.size(-1)), tokens[:, 1:].reshape(-1))
        return self.hparams.ctc_weight * loss_ctc + (1 - self.hparams.ctc_weight) * loss_seq


def make_batches(n_batches, batch_size, n_frames, n_mels, n_tokens, vocab):
    batches = []
    for _ in range(n_batches):
        feats = torch.randn(batch_size, n_frames, n_mels).abs().log1p()
        tokens = torch.randint(1, vocab, (batch_size, n_tokens))
        batches.append((feats, torch.ones(batch_size), tokens,
                        torch.full((batch_size,), n_tokens, dtype=torch.long)))
    return batches


if __name__ == "__main__":
    hparams = {"d_model": 32, "nhead": 4, "num_encoder_layers": 2, "d_ffn": 64,
               "output_neurons": 30, "blank_index": 0, "ctc_weight": 0.3,
               "max_grad_norm": 5.0, "lr": 1e-3, "prune_amount": 0.3, "epochs": 2}
    modules = {
        "CNN": ConvolutionFrontEnd(40, 8, hparams["d_model"]),
        "Transformer": TransformerASR(hparams["d_model"], hparams["nhead"],
                                      hparams["num_encoder_layers"], hparams["d_ffn"]),
        "ctc_lin": nn.Linear(hparams["d_model"], hparams["output_neurons"]),
        "seq_lin": nn.Linear(hparams["d_model"], hparams["output_neurons"]),
        "tok_emb": nn.Embedding(hparams["output_neurons"], hparams["d_model"]),
    }
    train_data = make_batches(4, 4, 24, 40, 6, hparams["output_neurons"])
    valid_data = make_batches(2, 4, 24, 40, 6, hparams["output_neurons"])

    asr_brain = ASR(modules=modules,
                    opt_class=lambda params: torch.optim.Adam(params, lr=hparams["lr"]),
                    hparams=hparams, run_opts={"device": "cpu"})
    remain = asr_brain.prune_model(hparams["prune_amount"])
    print(f"remaining weights after pruning: {remain:.1f}%")
    asr_brain.fit(range(1, hparams["epochs"] + 1), train_data, valid_data)
