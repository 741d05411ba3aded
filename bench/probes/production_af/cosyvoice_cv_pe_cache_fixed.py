# expect: clean
# source: https://github.com/QwenAudio/CosyVoice/issues/177
"""Text-to-mel acoustic model trained with a CosyVoice/WeNet-style executor.

A conformer-lite text encoder (token embedding, ESPnet relative positional encoding
with a lazily extended table, relative-position multi-head attention, feed-forward
macaron blocks), a length regulator and a mel decoder trained with L1.  The executor
follows CosyVoice: train_one_epoc runs batch_forward / batch_backward /
update_parameter_and_lr, and every `save_per_step` steps runs cross-validation and
saves a checkpoint (kept in memory here).  Synthetic token / mel pairs, CPU only.
"""
import copy
import logging
import math
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

configs = {
    "text_encoder": {"vocab_size": 64, "output_size": 32, "attention_heads": 4,
                     "num_blocks": 2, "dropout_rate": 0.1, "positional_dropout_rate": 0.0,
                     "pos_enc_max_len": 32},
    "decoder": {"mel_bins": 20, "upsample": 2},
    "train_conf": {"lr": 1e-3, "warmup_steps": 4, "grad_clip": 5.0, "accum_grad": 1,
                   "save_per_step": 2, "max_epoch": 2},
}


class EspnetRelPositionalEncoding(nn.Module):
    """Relative positional encoding module (new implementation)."""

    def __init__(self, d_model, dropout_rate, max_len=5000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(self.d_model)
        self.dropout = nn.Dropout(p=dropout_rate)
        self.pe = None
        self.extend_pe(torch.tensor(0.0).expand(1, max_len))

    def extend_pe(self, x):
        """Reset the positional encodings."""
        if self.pe is not None:
            if self.pe.size(1) >= x.size(1) * 2 - 1:
                if self.pe.dtype != x.dtype or self.pe.device != x.device:
                    self.pe = self.pe.to(dtype=x.dtype, device=x.device)
                return
        pe_positive = torch.zeros(x.size(1), self.d_model)
        pe_negative = torch.zeros(x.size(1), self.d_model)
        position = torch.arange(0, x.size(1), dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32)
                             * -(math.log(10000.0) / self.d_model))
        pe_positive[:, 0::2] = torch.sin(position * div_term)
        pe_positive[:, 1::2] = torch.cos(position * div_term)
        pe_negative[:, 0::2] = torch.sin(-1 * position * div_term)
        pe_negative[:, 1::2] = torch.cos(-1 * position * div_term)
        pe_positive = torch.flip(pe_positive, [0]).unsqueeze(0)
        pe_negative = pe_negative[1:].unsqueeze(0)
        pe = torch.cat([pe_positive, pe_negative], dim=1)
        self.pe = pe.to(device=x.device, dtype=x.dtype)

    def forward(self, x, offset=0):
        self.extend_pe(x)
        x = x * self.xscale
        pos_emb = self.position_encoding(size=x.size(1), offset=offset)
        return self.dropout(x), self.dropout(pos_emb)

    def position_encoding(self, offset, size):
        return self.pe[:, self.pe.size(1) // 2 - size + 1: self.pe.size(1) // 2 + size]


class RelPositionMultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat, dropout_rate):
        super().__init__()
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(self.h, self.d_k))
        self.dropout = nn.Dropout(p=dropout_rate)

    def rel_shift(self, x):
        zero_pad = torch.zeros((x.size(0), x.size(1), x.size(2), 1), dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(x.size(0), x.size(1), x.size(3) + 1, x.size(2))
        return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

    def forward(self, x, mask, pos_emb):
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d_k)
        k = self.linear_k(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k)
        p = p.transpose(1, 2)
        q_u = (q + self.pos_bias_u).transpose(1, 2)
        q_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_u, k.transpose(-2, -1))
        matrix_bd = self.rel_shift(torch.matmul(q_v, p.transpose(-2, -1)))
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        attn = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, -1)
        return self.linear_out(out)


class ConformerBlock(nn.Module):
    def __init__(self, size, heads, dropout_rate):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(size), nn.Linear(size, 4 * size), nn.SiLU(), nn.Linear(4 * size, size))
        self.norm_mha = nn.LayerNorm(size)
        self.self_attn = RelPositionMultiHeadedAttention(heads, size, dropout_rate)
        self.ff2 = nn.Sequential(nn.LayerNorm(size), nn.Linear(size, 4 * size), nn.SiLU(), nn.Linear(4 * size, size))
        self.norm_final = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x, mask, pos_emb):
        x = x + 0.5 * self.dropout(self.ff1(x))
        x = x + self.dropout(self.self_attn(self.norm_mha(x), mask, pos_emb))
        x = x + 0.5 * self.dropout(self.ff2(x))
        return self.norm_final(x)


class TextEncoder(nn.Module):
    def __init__(self, vocab_size, output_size, attention_heads, num_blocks, dropout_rate,
                 positional_dropout_rate, pos_enc_max_len):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, output_size)
        self.pos_enc = EspnetRelPositionalEncoding(output_size, positional_dropout_rate, pos_enc_max_len)
        self.encoders = nn.ModuleList([ConformerBlock(output_size, attention_heads, dropout_rate)
                                       for _ in range(num_blocks)])

    def forward(self, text, text_lens):
        mask = torch.arange(text.size(1))[None] < text_lens[:, None]
        x, pos_emb = self.pos_enc(self.embed(text))
        for layer in self.encoders:
            x = layer(x, mask, pos_emb)
        return x, mask


class TextToMel(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.encoder = TextEncoder(**configs["text_encoder"])
        d = configs["text_encoder"]["output_size"]
        self.upsample = configs["decoder"]["upsample"]
        self.decoder = nn.Sequential(nn.Conv1d(d, d, 3, padding=1), nn.GELU(),
                                     nn.Conv1d(d, configs["decoder"]["mel_bins"], 1))

    def forward(self, batch, device):
        h, mask = self.encoder(batch["text_token"].to(device), batch["text_token_len"].to(device))
        h = h.repeat_interleave(self.upsample, dim=1)
        mel_mask = mask.repeat_interleave(self.upsample, dim=1).unsqueeze(-1)
        mel_pred = self.decoder(h.transpose(1, 2)).transpose(1, 2)
        loss = (F.l1_loss(mel_pred, batch["speech_feat"], reduction="none") * mel_mask).sum() / mel_mask.sum()
        return {"loss": loss}


def batch_forward(model, batch, info_dict):
    info_dict["loss_dict"] = model(batch, torch.device("cpu"))
    return info_dict


def batch_backward(model, info_dict):
    scaled_loss = info_dict["loss_dict"]["loss"] / info_dict["accum_grad"]
    scaled_loss.backward()
    return info_dict


def update_parameter_and_lr(model, optimizer, scheduler, info_dict):
    if (info_dict["batch_idx"] + 1) % info_dict["accum_grad"] == 0:
        info_dict["grad_norm"] = nn.utils.clip_grad_norm_(model.parameters(), info_dict["grad_clip"])
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    info_dict["lr"] = optimizer.param_groups[0]["lr"]
    return info_dict


def log_per_step(info_dict):
    logging.info("%s step %d loss %.4f", info_dict["tag"], info_dict["step"], info_dict["loss_dict"]["loss"].item())


class Executor:
    def __init__(self):
        self.step = 0
        self.epoch = 0
        self.checkpoints = {}

    def train_one_epoc(self, model, optimizer, scheduler, train_data_loader, cv_data_loader, info_dict):
        model.train()
        for batch_idx, batch_dict in enumerate(train_data_loader):
            info_dict.update(tag="TRAIN", step=self.step, epoch=self.epoch, batch_idx=batch_idx)
            with nullcontext():
                info_dict = batch_forward(model, batch_dict, info_dict)
                info_dict = batch_backward(model, info_dict)
            info_dict = update_parameter_and_lr(model, optimizer, scheduler, info_dict)
            log_per_step(info_dict)
            if info_dict["save_per_step"] > 0 and (self.step + 1) % info_dict["save_per_step"] == 0:
                self.cv(model, cv_data_loader, info_dict, on_batch_end=False)
                model.train()
            self.step += 1
        self.cv(model, cv_data_loader, info_dict, on_batch_end=True)

    @torch.no_grad()
    def cv(self, model, cv_data_loader, info_dict, on_batch_end=True):
        model.eval()
        total_num_utts, total_loss = 0, 0.0
        for batch_idx, batch_dict in enumerate(cv_data_loader):
            info_dict.update(tag="CV", batch_idx=batch_idx)
            num_utts = len(batch_dict["utts"])
            total_num_utts += num_utts
            info_dict = batch_forward(model, batch_dict, info_dict)
            total_loss += info_dict["loss_dict"]["loss"].item() * num_utts
        name = f"epoch_{self.epoch}_whole" if on_batch_end else f"epoch_{self.epoch}_step_{self.step + 1}"
        self.checkpoints[name] = copy.deepcopy(model.state_dict())
        print(f"CV {name}: loss {total_loss / total_num_utts:.4f}")


def make_loader(n_batches, max_tokens, seed, batch_size=4, mel_bins=20, upsample=2):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for i in range(n_batches):
        lens = torch.randint(max_tokens - 8, max_tokens + 1, (batch_size,), generator=g)
        t = int(lens.max())
        batches.append({
            "utts": [f"utt{seed}_{i}_{j}" for j in range(batch_size)],
            "text_token": torch.randint(1, 64, (batch_size, t), generator=g),
            "text_token_len": lens,
            "speech_feat": torch.randn(batch_size, t * upsample, mel_bins, generator=g),
        })
    return batches


def main():
    torch.manual_seed(0)
    model = TextToMel(configs)
    tc = configs["train_conf"]
    optimizer = torch.optim.Adam(model.parameters(), lr=tc["lr"])
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / tc["warmup_steps"], (tc["warmup_steps"] / (s + 1)) ** 0.5))
    train_data_loader = make_loader(4, max_tokens=24, seed=1)
    cv_data_loader = make_loader(2, max_tokens=48, seed=2)
    info_dict = {"accum_grad": tc["accum_grad"], "grad_clip": tc["grad_clip"], "save_per_step": tc["save_per_step"]}
    executor = Executor()
    for epoch in range(tc["max_epoch"]):
        executor.epoch = epoch
        executor.train_one_epoc(model, optimizer, scheduler, train_data_loader, cv_data_loader, info_dict)


if __name__ == "__main__":
    main()
