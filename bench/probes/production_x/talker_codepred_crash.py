# expect: inference_tensor
# source: https://github.com/sgl-project/sglang-omni/pull/1720
"""Speech "talker" fine-tuning with a frozen multi-codebook code predictor.

The talker is a small causal transformer that, given text hidden states and
the previous acoustic frame, predicts codebook-0 of a residual speech codec.
A frozen code predictor fills in the residual codebooks 1..Q-1 for each frame
(as in Qwen-Omni style talkers); the summed codec embeddings of a frame are
the talker's next input.  Training uses teacher forcing on codebook-0 with
predictor-completed frames.  Text states and codec tokens are seeded
synthetic data.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class CodecEmbedding(nn.Module):
    def __init__(self, num_quantizers, codebook_size, dim):
        super().__init__()
        self.codebooks = nn.ModuleList([nn.Embedding(codebook_size, dim) for _ in range(num_quantizers)])

    def forward(self, codes):
        # codes: [B, T, Q] -> summed frame embedding [B, T, D]
        return sum(cb(codes[..., q]) for q, cb in enumerate(self.codebooks))


class CodePredictor(nn.Module):
    """Predicts residual codebooks 1..Q-1 from the talker state and codebook 0."""

    def __init__(self, cfg, codec_embedding):
        super().__init__()
        self.cfg = cfg
        self.codec_embedding = codec_embedding
        self.mlp = nn.Sequential(nn.Linear(2 * cfg.dim, cfg.dim), nn.GELU(), nn.Linear(cfg.dim, cfg.dim))
        self.heads = nn.ModuleList([nn.Linear(cfg.dim, cfg.codebook_size) for _ in range(cfg.num_quantizers - 1)])

    def forward(self, hidden, code0):
        state = self.codec_embedding.codebooks[0](code0)
        codes = [code0]
        for q, head in enumerate(self.heads, start=1):
            h = self.mlp(torch.cat([hidden, state], -1))
            code_q = head(h).argmax(-1)
            codes.append(code_q)
            state = state + self.codec_embedding.codebooks[q](code_q)
        return torch.stack(codes, -1)


@torch.inference_mode()
def code_predictor_forward(code_predictor, hidden, code0):
    """Run the frozen code predictor and return the completed frame embeddings."""
    codes = code_predictor(hidden, code0)
    return code_predictor.codec_embedding(codes), codes


class Talker(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.text_proj = nn.Linear(cfg.text_dim, cfg.dim)
        self.input_proj = nn.Linear(cfg.dim, cfg.dim)
        layer = nn.TransformerEncoderLayer(cfg.dim, nhead=4, dim_feedforward=2 * cfg.dim, batch_first=True, dropout=0.0)
        self.decoder = nn.TransformerEncoder(layer, num_layers=cfg.n_layers)
        self.codec_head = nn.Linear(cfg.dim, cfg.codebook_size)
        self.frame_head = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, text_states, frame_embeds):
        t = frame_embeds.size(1)
        x = self.text_proj(text_states) + self.input_proj(frame_embeds)
        mask = torch.triu(torch.full((t, t), float('-inf')), 1)
        hidden = self.decoder(x, mask=mask)
        return self.codec_head(hidden), hidden


class TalkerTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.codec_embedding = CodecEmbedding(cfg.num_quantizers, cfg.codebook_size, cfg.dim)
        self.code_predictor = CodePredictor(cfg, self.codec_embedding)
        for p in self.code_predictor.parameters():
            p.requires_grad_(False)
        self.code_predictor.eval()
        self.talker = Talker(cfg)
        self.optimizer = torch.optim.AdamW(self.talker.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=cfg.max_steps)
        self._bos = torch.zeros(1, 1, cfg.dim)

    def build_inputs(self, text_states, code0):
        """Teacher forcing: frame t+1 input is the predictor-completed frame t."""
        frame_embeds, _ = code_predictor_forward(self.code_predictor, text_states.new_zeros(
            code0.shape + (self.cfg.dim,)), code0)
        bos = self._bos.expand(code0.size(0), 1, self.cfg.dim)
        return torch.cat([bos, frame_embeds[:, :-1]], 1), frame_embeds

    def train_step(self, batch):
        self.talker.train()
        inputs, frame_targets = self.build_inputs(batch['text_states'], batch['code0'])
        logits, hidden = self.talker(batch['text_states'], inputs)
        loss = F.cross_entropy(logits.reshape(-1, self.cfg.codebook_size), batch['code0'].reshape(-1))
        # auxiliary frame regression towards the completed (all-codebook) frame
        aux_loss = F.mse_loss(self.talker.frame_head(hidden), frame_targets)  # raises
        loss = loss + self.cfg.aux_weight * aux_loss
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.talker.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batch):
        self.talker.eval()
        inputs, _ = self.build_inputs(batch['text_states'], batch['code0'])
        logits, _ = self.talker(batch['text_states'], inputs)
        return (logits.argmax(-1) == batch['code0']).float().mean().item()


class Callback:
    def on_step_end(self, trainer, step, logs):
        pass

    def on_eval_end(self, trainer, step, metrics):
        pass


class LoggingCallback(Callback):
    def __init__(self, every=1):
        self.every = every
        self.history = []

    def on_step_end(self, trainer, step, logs):
        self.history.append(logs)
        if step % self.every == 0:
            print('step %d loss %.4f lr %.2e' % (step, logs['loss'], logs['lr']))

    def on_eval_end(self, trainer, step, metrics):
        print('step %d eval %s' % (step, ' '.join('%s=%.3f' % kv for kv in metrics.items())))


class BestStateCallback(Callback):
    """Keeps an in-memory copy of the best talker weights (by code-0 accuracy)."""

    def __init__(self):
        self.best_acc = -1.0
        self.best_state = None

    def on_eval_end(self, trainer, step, metrics):
        if metrics['code0_acc'] > self.best_acc:
            self.best_acc = metrics['code0_acc']
            self.best_state = {k: v.detach().clone() for k, v in trainer.talker.state_dict().items()}


def run_training(trainer, train_batches, val_batches, callbacks, eval_every):
    for step, batch in enumerate(train_batches):
        loss = trainer.train_step(batch)
        logs = {'loss': loss, 'lr': trainer.scheduler.get_last_lr()[0]}
        for cb in callbacks:
            cb.on_step_end(trainer, step, logs)
        if step % eval_every == 0:
            acc = sum(trainer.evaluate(b) for b in val_batches) / len(val_batches)
            for cb in callbacks:
                cb.on_eval_end(trainer, step, {'code0_acc': acc})


def make_batches(cfg, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [{'text_states': torch.randn(cfg.batch_size, cfg.frames, cfg.text_dim, generator=g),
             'code0': torch.randint(0, cfg.codebook_size, (cfg.batch_size, cfg.frames), generator=g)}
            for _ in range(n)]


def main():
    torch.manual_seed(0)
    cfg = SimpleNamespace(dim=32, text_dim=24, codebook_size=32, num_quantizers=4, n_layers=2,
                          frames=10, batch_size=4, lr=3e-4, max_steps=6, aux_weight=0.1)
    trainer = TalkerTrainer(cfg)
    train_batches = make_batches(cfg, cfg.max_steps, seed=0)
    val_batches = make_batches(cfg, 2, seed=1)
    best = BestStateCallback()
    run_training(trainer, train_batches, val_batches, [LoggingCallback(every=2), best], eval_every=3)
    print('best code-0 accuracy %.3f' % best.best_acc)


if __name__ == '__main__':
    main()
