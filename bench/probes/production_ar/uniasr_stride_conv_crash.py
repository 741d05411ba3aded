# expect: inplace_version
# source: https://github.com/modelscope/FunASR/issues/312
"""Two-pass UniASR-style streaming/offline CTC recognizer (fine-tuning loop).

FunASR-like layout: a SANM encoder (self-attention with an FSMN memory block)
over fbank features, a Conv1dSubsampling "stride_conv" between the two passes,
a second SANM encoder, and CTC heads on both passes.  Configuration is a nested
dict as read from the recipe yaml; features and transcripts are synthetic.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONF = {
    "frontend_conf": {"n_mels": 40},
    "encoder_conf": {"output_size": 32, "attention_heads": 4, "linear_units": 64,
                     "num_blocks": 2, "kernel_size": 5, "dropout_rate": 0.1},
    "stride_conv_conf": {"kernel_size": 3, "stride": 2, "pad": (1, 1)},
    "encoder2_conf": {"output_size": 32, "attention_heads": 4, "linear_units": 64,
                      "num_blocks": 1, "kernel_size": 5, "dropout_rate": 0.1},
    "model_conf": {"ctc_weight": 1.0, "loss_weight_model1": 0.5},
    "optim_conf": {"lr": 0.002, "warmup_steps": 4},
    "vocab_size": 12,
    "batch_size": 4,
    "max_epoch": 2,
    "seed": 0,
}


def make_pad_mask(lengths, maxlen=None):
    maxlen = int(lengths.max()) if maxlen is None else maxlen
    seq = torch.arange(maxlen, device=lengths.device).unsqueeze(0)
    return seq >= lengths.unsqueeze(1)


class SinusoidalPositionEncoder(nn.Module):
    def forward(self, x):
        b, t, d = x.shape
        pos = torch.arange(1, t + 1, dtype=x.dtype).unsqueeze(1)
        inv = torch.exp(torch.arange(0, d // 2, dtype=x.dtype) * (-math.log(10000.0) / (d // 2 - 1)))
        enc = torch.cat([torch.sin(pos * inv), torch.cos(pos * inv)], dim=1)
        return x + enc.unsqueeze(0)


class MultiHeadedAttentionSANM(nn.Module):
    def __init__(self, n_head, n_feat, kernel_size, dropout_rate):
        super().__init__()
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q_k_v = nn.Linear(n_feat, n_feat * 3)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.fsmn_block = nn.Conv1d(n_feat, n_feat, kernel_size, padding=kernel_size // 2,
                                    groups=n_feat, bias=False)
        self.dropout = nn.Dropout(dropout_rate)

    def forward_fsmn(self, inputs, mask):
        inputs = inputs * mask.transpose(1, 2)
        x = self.fsmn_block(inputs.transpose(1, 2)).transpose(1, 2)
        return self.dropout(x + inputs) * mask.transpose(1, 2)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = torch.split(self.linear_q_k_v(x), self.h * self.d_k, dim=-1)
        fsmn_memory = self.forward_fsmn(v, mask)
        q = q.view(b, t, self.h, self.d_k).transpose(1, 2)
        k = k.view(b, t, self.h, self.d_k).transpose(1, 2)
        v = v.view(b, t, self.h, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        scores = scores.masked_fill(~mask.unsqueeze(1).bool(), float("-inf"))
        attn = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, -1)
        return self.linear_out(out) + fsmn_memory


class EncoderLayerSANM(nn.Module):
    def __init__(self, size, self_attn, linear_units, dropout_rate):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = nn.Sequential(nn.Linear(size, linear_units), nn.ReLU(),
                                          nn.Dropout(dropout_rate), nn.Linear(linear_units, size))
        self.norm1 = nn.LayerNorm(size)
        self.norm2 = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x, mask):
        x = x + self.dropout(self.self_attn(self.norm1(x), mask))
        x = x + self.dropout(self.feed_forward(self.norm2(x)))
        return x, mask


class SANMEncoder(nn.Module):
    def __init__(self, input_size, output_size, attention_heads, linear_units, num_blocks,
                 kernel_size, dropout_rate):
        super().__init__()
        self._output_size = output_size
        self.embed = SinusoidalPositionEncoder()
        self.input_proj = nn.Linear(input_size, output_size) if input_size != output_size else nn.Identity()
        self.encoders = nn.ModuleList([
            EncoderLayerSANM(output_size,
                             MultiHeadedAttentionSANM(attention_heads, output_size, kernel_size, dropout_rate),
                             linear_units, dropout_rate)
            for _ in range(num_blocks)])
        self.after_norm = nn.LayerNorm(output_size)

    def output_size(self):
        return self._output_size

    def forward(self, xs_pad, ilens):
        masks = (~make_pad_mask(ilens, xs_pad.size(1))[:, None, :]).float()
        xs_pad *= self.output_size() ** 0.5
        xs_pad = self.embed(self.input_proj(xs_pad))
        for layer in self.encoders:
            xs_pad, masks = layer(xs_pad, masks)
        xs_pad = self.after_norm(xs_pad)
        olens = masks.squeeze(1).sum(1).long()
        return xs_pad, olens


class Conv1dSubsampling(nn.Module):
    def __init__(self, idim, odim, kernel_size, stride, pad):
        super().__init__()
        self.conv = nn.Conv1d(idim, odim, kernel_size, stride)
        self.pad_fn = nn.ConstantPad1d(pad, 0.0)
        self.stride = stride
        self.odim = odim

    def output_size(self):
        return self.odim

    def forward(self, x, x_len):
        x = x.transpose(1, 2)  # (b, d ,t)
        x = self.pad_fn(x)
        x = F.relu(self.conv(x))
        x = x.transpose(1, 2)  # (b, t ,d)
        if x_len is None:
            return x, None
        x_len = (x_len - 1) // self.stride + 1
        return x, x_len


class CTC(nn.Module):
    def __init__(self, odim, encoder_output_size):
        super().__init__()
        self.ctc_lo = nn.Linear(encoder_output_size, odim)

    def forward(self, hs_pad, hlens, ys_pad, ys_lens):
        log_probs = F.log_softmax(self.ctc_lo(hs_pad), dim=-1).transpose(0, 1)
        return F.ctc_loss(log_probs, ys_pad, hlens, ys_lens, blank=0,
                          reduction="sum", zero_infinity=True) / hs_pad.size(0)

    def argmax(self, hs_pad):
        return self.ctc_lo(hs_pad).argmax(dim=-1)


class UniASR(nn.Module):
    def __init__(self, conf):
        super().__init__()
        n_mels = conf["frontend_conf"]["n_mels"]
        enc1, enc2 = conf["encoder_conf"], conf["encoder2_conf"]
        self.encoder = SANMEncoder(n_mels, **enc1)
        self.stride_conv = Conv1dSubsampling(enc1["output_size"], enc2["output_size"],
                                             **conf["stride_conv_conf"])
        self.encoder2 = SANMEncoder(enc2["output_size"], **enc2)
        self.ctc = CTC(conf["vocab_size"], enc1["output_size"])
        self.ctc2 = CTC(conf["vocab_size"], enc2["output_size"])
        self.loss_weight_model1 = conf["model_conf"]["loss_weight_model1"]

    def encode(self, speech, speech_lengths):
        encoder_out, encoder_out_lens = self.encoder(speech, speech_lengths)
        return encoder_out, encoder_out_lens

    def encode2(self, encoder_out, encoder_out_lens):
        encoder_out_rm, encoder_out_lens_rm = self.stride_conv(encoder_out, encoder_out_lens)
        encoder_out2, encoder_out_lens2 = self.encoder2(encoder_out_rm, encoder_out_lens_rm)
        return encoder_out2, encoder_out_lens2

    def forward(self, speech, speech_lengths, text, text_lengths):
        encoder_out, encoder_out_lens = self.encode(speech, speech_lengths)
        loss_ctc = self.ctc(encoder_out, encoder_out_lens, text, text_lengths)
        encoder_out2, encoder_out_lens2 = self.encode2(encoder_out, encoder_out_lens)
        loss_ctc2 = self.ctc2(encoder_out2, encoder_out_lens2, text, text_lengths)
        loss = self.loss_weight_model1 * loss_ctc + (1 - self.loss_weight_model1) * loss_ctc2
        stats = {"loss_ctc": loss_ctc.detach(), "loss_ctc2": loss_ctc2.detach()}
        return loss, stats


class WarmupLR(torch.optim.lr_scheduler._LRScheduler):
    def __init__(self, optimizer, warmup_steps=25000, last_epoch=-1):
        self.warmup_steps = warmup_steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        step_num = self.last_epoch + 1
        return [lr * self.warmup_steps ** 0.5 * min(step_num ** -0.5, step_num * self.warmup_steps ** -1.5)
                for lr in self.base_lrs]


def synthetic_batches(conf, n_batches, seed):
    rng = np.random.RandomState(seed)
    batches = []
    for _ in range(n_batches):
        B = conf["batch_size"]
        lens = rng.randint(40, 65, size=B)
        feats = np.zeros((B, lens.max(), conf["frontend_conf"]["n_mels"]), dtype=np.float32)
        for b in range(B):
            feats[b, :lens[b]] = rng.randn(lens[b], feats.shape[2])
        tlens = rng.randint(3, 7, size=B)
        text = rng.randint(1, conf["vocab_size"], size=(B, tlens.max()))
        batches.append((torch.from_numpy(feats), torch.from_numpy(lens), torch.from_numpy(text),
                        torch.from_numpy(tlens)))
    return batches


class StatsReporter:
    def __init__(self):
        self.history = []

    def on_batch_end(self, epoch, step, loss, stats):
        self.history.append(loss)
        print(f"epoch {epoch} step {step} loss {loss:.3f} "
              + " ".join(f"{k} {v.item():.3f}" for k, v in stats.items()))


class Trainer:
    def __init__(self, model, conf, reporters=()):
        self.model = model
        self.conf = conf
        self.reporters = list(reporters)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=conf["optim_conf"]["lr"])
        self.scheduler = WarmupLR(self.optimizer, conf["optim_conf"]["warmup_steps"])
        self.step = 0

    def train_step(self, batch):
        speech, speech_lengths, text, text_lengths = batch
        self.model.train()
        loss, stats = self.model(speech, speech_lengths, text, text_lengths)
        self.optimizer.zero_grad()
        loss.backward()  # raises
        nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return loss.item(), stats

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        total = 0.0
        for speech, speech_lengths, text, text_lengths in batches:
            loss, _ = self.model(speech, speech_lengths, text, text_lengths)
            total += loss.item()
        return total / len(batches)

    def run(self, train_batches, valid_batches):
        for epoch in range(self.conf["max_epoch"]):
            for batch in train_batches:
                loss, stats = self.train_step(batch)
                for r in self.reporters:
                    r.on_batch_end(epoch, self.step, loss, stats)
            print(f"epoch {epoch} valid loss {self.evaluate(valid_batches):.3f}")


def main():
    torch.manual_seed(CONF["seed"])
    model = UniASR(CONF)
    trainer = Trainer(model, CONF, reporters=[StatsReporter()])
    trainer.run(synthetic_batches(CONF, 3, CONF["seed"]), synthetic_batches(CONF, 1, CONF["seed"] + 1))


if __name__ == "__main__":
    main()
