# expect: clean
# source: https://github.com/arxyzan/data2vec-pytorch/issues/22
"""data2vec self-supervised pretraining for speech, audio modality only.

Follows data2vec-pytorch: a wav2vec2-style encoder (conv feature extractor +
transformer) is the student, an EMA copy of it is the teacher, the student
regresses the instance-normalised average of the teacher's top-k layer outputs
at masked time steps.  A Wav2Vec2-like data collator pads raw waveforms and
samples span masks.  The AudioTrainer runs train_step / test_step / epochs and
tracks losses with an AverageMeter; synthetic tones replace TIMIT.
"""
import copy
import io
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def ns(**kw):
    return SimpleNamespace(**kw)


cfg = ns(
    modality="audio", device="cpu", normalize_targets=True,
    model=ns(embed_dim=32, num_layers=3, num_heads=4, average_top_k_layers=2, ema_decay=0.999,
             ema_end_decay=0.9999, ema_anneal_end_step=300, mask_prob=0.5, mask_length=3),
    optimizer=ns(lr=5e-4),
    train=ns(batch_size=4, eval_batch_size=4, num_epochs=2, num_train=16, num_test=8, save_ckpt_freq=1),
)


class EMA:
    """Modified version of class fairseq.models.ema.EMAModule."""

    def __init__(self, model: nn.Module, cfg, skip_keys=None):
        self.model = copy.deepcopy(model)
        self.model.requires_grad_(False)
        self.cfg = cfg
        self.device = cfg.device
        self.model.to(self.device)
        self.skip_keys = skip_keys or set()
        self.decay = self.cfg.model.ema_decay
        self.num_updates = 0

    @torch.no_grad()
    def step(self, new_model: nn.Module):
        ema_state_dict = {}
        ema_params = self.model.state_dict()
        for key, param in new_model.state_dict().items():
            ema_param = ema_params[key].float()
            if key in self.skip_keys:
                ema_param = param.to(dtype=ema_param.dtype).clone()
            else:
                ema_param.mul_(self.decay)
                ema_param.add_(param.to(dtype=ema_param.dtype), alpha=1 - self.decay)
            ema_state_dict[key] = ema_param
        self.model.load_state_dict(ema_state_dict, strict=False)
        self.num_updates += 1

    @staticmethod
    def get_annealed_rate(start, end, curr_step, total_steps):
        r = end - start
        pct_remaining = 1 - curr_step / total_steps
        return end - r * pct_remaining


class Encoder(nn.Module):
    """Conv feature extractor + transformer, returning per-layer hidden states."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg.model.embed_dim
        self.feature_extractor = nn.Sequential(
            nn.Conv1d(1, d, 10, stride=5), nn.GELU(), nn.Conv1d(d, d, 4, stride=2), nn.GELU())
        self.mask_emb = nn.Parameter(torch.zeros(d).uniform_())
        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(d, cfg.model.num_heads, 2 * d, dropout=0.0,
                                                                batch_first=True)
                                     for _ in range(cfg.model.num_layers)])

    def frames(self, num_samples):
        return ((num_samples - 10) // 5 + 1 - 4) // 2 + 1

    def forward(self, src, mask=None):
        x = self.feature_extractor(src.unsqueeze(1)).transpose(1, 2)
        if mask is not None:
            x = torch.where(mask[..., None], self.mask_emb.to(x.dtype), x)
        states = []
        for layer in self.layers:
            x = layer(x)
            states.append(x)
        return {"encoder_out": x, "encoder_states": states}


class Data2Vec(nn.Module):
    def __init__(self, encoder, cfg):
        super().__init__()
        self.encoder = encoder
        self.cfg = cfg
        self.ema = EMA(self.encoder, cfg)
        self.regression_head = nn.Linear(cfg.model.embed_dim, cfg.model.embed_dim)
        self.ema_decay = self.cfg.model.ema_decay
        self.ema_end_decay = self.cfg.model.ema_end_decay
        self.ema_anneal_end_step = self.cfg.model.ema_anneal_end_step

    def ema_step(self):
        if self.ema_decay != self.ema_end_decay:
            if self.ema.num_updates >= self.ema_anneal_end_step:
                decay = self.ema_end_decay
            else:
                decay = self.ema.get_annealed_rate(self.ema_decay, self.ema_end_decay,
                                                   self.ema.num_updates, self.ema_anneal_end_step)
            self.ema.decay = decay
        if self.ema.decay < 1:
            self.ema.step(self.encoder)

    def forward(self, src, trg=None, mask=None):
        x = self.encoder(src, mask)["encoder_out"]
        if trg is None:
            return x
        with torch.no_grad():
            self.ema.model.eval()
            y = self.ema.model(trg, None)["encoder_states"]
            y = y[-self.cfg.model.average_top_k_layers:]
            y = [tl.permute(0, 2, 1) for tl in y]
            y = [F.instance_norm(tl.float()) for tl in y]
            y = [tl.transpose(1, 2) for tl in y]
            y = sum(y) / len(y)
            if self.cfg.normalize_targets:
                y = F.instance_norm(y.transpose(1, 2)).transpose(1, 2)
        x = x[mask]
        y = y[mask]
        x = self.regression_head(x)
        return x, y


def _compute_mask_indices(shape, mask_prob, mask_length, rng):
    batch_size, sequence_length = shape
    mask = np.zeros(shape, dtype=bool)
    num_spans = max(1, int(mask_prob * sequence_length / mask_length + rng.rand()))
    for b in range(batch_size):
        starts = rng.choice(sequence_length - mask_length, num_spans, replace=False)
        for s in starts:
            mask[b, s:s + mask_length] = True
    return mask


class DataCollatorForWav2Vec2Pretraining:
    def __init__(self, encoder, cfg, seed=0):
        self.encoder, self.cfg = encoder, cfg
        self.rng = np.random.RandomState(seed)

    def __call__(self, features):
        max_len = max(len(f) for f in features)
        src = torch.zeros(len(features), max_len)
        for i, f in enumerate(features):
            src[i, :len(f)] = torch.as_tensor(f)
        frames = self.encoder.frames(max_len)
        mask = _compute_mask_indices((len(features), frames), self.cfg.model.mask_prob,
                                     self.cfg.model.mask_length, self.rng)
        return src, torch.from_numpy(mask)


def synthetic_timit(n, rng):
    waves = []
    for _ in range(n):
        length = rng.randint(320, 400)
        t = np.arange(length) / 8000.0
        f0 = rng.uniform(100, 300)
        waves.append((np.sin(2 * np.pi * f0 * t) + 0.1 * rng.randn(length)).astype(np.float32))
    return waves


class AverageMeter(object):
    def __init__(self, name):
        self.name = name
        self.reset()

    def reset(self):
        self.val, self.avg, self.sum, self.count = 0, 0, 0, 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def maybe_save_checkpoint(model, optimizer, epoch, save_freq, sink):
    if epoch % save_freq == 0:
        torch.save({"encoder": model.encoder.state_dict(), "optim": optimizer.state_dict()}, sink)


class AudioTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.num_epochs = self.cfg.train.num_epochs
        self.device = self.cfg.device
        self.save_ckpt_freq = cfg.train.save_ckpt_freq
        # Model, Optim, Criterion
        self.encoder = Encoder(cfg=cfg)
        self.model = Data2Vec(encoder=self.encoder, cfg=cfg)
        self.model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), cfg.optimizer.lr)
        self.criterion = nn.MSELoss(reduction='none')
        # Datasets & Data Loaders
        rng = np.random.RandomState(0)
        self.train_dataset = synthetic_timit(cfg.train.num_train, rng)
        self.test_dataset = synthetic_timit(cfg.train.num_test, rng)
        self.data_collator = DataCollatorForWav2Vec2Pretraining(self.encoder, cfg)
        self.loss_tracker = AverageMeter('loss')

    def loader(self, dataset, batch_size):
        for i in range(0, len(dataset), batch_size):
            yield self.data_collator(dataset[i:i + batch_size])

    def train_step(self, batch):
        src, mask = batch
        src, mask = src.to(self.device), mask.to(self.device)
        # src is not masked so can be used as trg. (src will be masked in the encoder forward)
        x, y = self.model(src, src, mask)
        loss = self.criterion(x.float(), y.float()).sum(dim=-1).sum().div(x.size(0))
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss.item()

    def test_step(self, batch):
        src, mask = batch
        src, mask = src.to(self.device), mask.to(self.device)
        x, y = self.model(src, src, mask=mask)
        loss = self.criterion(x.float(), y.float()).sum(dim=-1).sum().div(x.size(0))
        return loss.item()

    def train_epoch(self, epoch_num):
        self.model.train()
        self.loss_tracker.reset()
        for batch in self.loader(self.train_dataset, self.cfg.train.batch_size):
            loss = self.train_step(batch)
            self.model.ema_step()
            self.loss_tracker.update(loss)
        return self.loss_tracker.avg

    def evaluate(self):
        self.model.eval()
        self.loss_tracker.reset()
        with torch.no_grad():
            for batch in self.loader(self.test_dataset, self.cfg.train.eval_batch_size):
                self.loss_tracker.update(self.test_step(batch))
        return self.loss_tracker.avg

    def train(self):
        sink = io.BytesIO()
        for epoch in range(1, self.num_epochs + 1):
            train_loss = self.train_epoch(epoch)
            val_loss = self.evaluate()
            print(f"epoch {epoch}: train_loss={train_loss:.4f} val_loss={val_loss:.4f}")
            maybe_save_checkpoint(self.model, self.optimizer, epoch, self.save_ckpt_freq, sink)


if __name__ == '__main__':
    torch.manual_seed(0)
    trainer = AudioTrainer(cfg)
    trainer.train()
