# expect: inference_tensor
# source: https://github.com/Lightning-AI/pytorch-lightning/issues/14497
"""Linear-chain CRF tagger with a Lightning-style trainer.

Validation reports token accuracy of the Viterbi path and the expected accuracy
under the CRF posterior. The posterior marginals are obtained the usual
structured-prediction way: as the gradient of the log-partition function with
respect to the emission scores, so validation needs autograd.
"""
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


# --------------------------------------------------------------------------- mini trainer
class LightningModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.logged = {}

    def log(self, name, value):
        self.logged.setdefault(name, []).append(float(value))


class Trainer:
    def __init__(self, max_epochs=1, inference_mode=True):
        self.max_epochs = max_epochs
        self.inference_mode = inference_mode

    @contextmanager
    def _evaluation_context(self):
        ctx = torch.inference_mode() if self.inference_mode else torch.no_grad()
        with ctx:
            yield

    def fit(self, model, train_dataloaders):
        optimizer = model.configure_optimizers()
        for epoch in range(self.max_epochs):
            model.train()
            for batch_idx, batch in enumerate(train_dataloaders):
                optimizer.zero_grad()
                loss = model.training_step(batch, batch_idx)
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch}  train_loss {loss.item():.4f}")

    def validate(self, model, dataloaders):
        model.eval()
        with self._evaluation_context():
            for batch_idx, batch in enumerate(dataloaders):
                model.validation_step(batch, batch_idx)
        model.train()
        return {k: sum(v) / len(v) for k, v in model.logged.items() if k.startswith("val")}


# --------------------------------------------------------------------------- model
class LinearChainCRF(nn.Module):
    def __init__(self, num_tags):
        super().__init__()
        self.transitions = nn.Parameter(0.1 * torch.randn(num_tags, num_tags))
        self.start = nn.Parameter(torch.zeros(num_tags))

    def log_partition(self, emissions):
        # emissions: (B, T, K)
        alpha = self.start + emissions[:, 0]
        for t in range(1, emissions.shape[1]):
            alpha = torch.logsumexp(alpha.unsqueeze(2) + self.transitions + emissions[:, t].unsqueeze(1), dim=1)
        return torch.logsumexp(alpha, dim=1)

    def score(self, emissions, tags):
        b = torch.arange(emissions.shape[0])
        s = self.start[tags[:, 0]] + emissions[b, 0, tags[:, 0]]
        for t in range(1, emissions.shape[1]):
            s = s + self.transitions[tags[:, t - 1], tags[:, t]] + emissions[b, t, tags[:, t]]
        return s

    def viterbi(self, emissions):
        score = self.start + emissions[:, 0]
        history = []
        for t in range(1, emissions.shape[1]):
            total = score.unsqueeze(2) + self.transitions
            score, idx = total.max(dim=1)
            score = score + emissions[:, t]
            history.append(idx)
        best = [score.argmax(dim=1)]
        for idx in reversed(history):
            best.append(idx.gather(1, best[-1].unsqueeze(1)).squeeze(1))
        return torch.stack(best[::-1], dim=1)


@dataclass
class TaggerConfig:
    vocab_dim: int = 16
    hidden: int = 32
    num_tags: int = 4
    lr: float = 5e-3


class CRFTagger(LightningModule):
    def __init__(self, cfg: TaggerConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = nn.Sequential(nn.Linear(cfg.vocab_dim, cfg.hidden), nn.Tanh())
        self.emission = nn.Linear(cfg.hidden, cfg.num_tags)
        self.crf = LinearChainCRF(cfg.num_tags)

    def forward(self, x):
        return self.emission(self.encoder(x))  # raises

    def training_step(self, batch, batch_idx):
        x, tags = batch
        emissions = self(x)
        nll = self.crf.log_partition(emissions) - self.crf.score(emissions, tags)
        return nll.mean()

    def marginals(self, x):
        """Posterior tag marginals as d logZ / d emissions."""
        emissions = self(x)
        log_z = self.crf.log_partition(emissions)
        (marg,) = torch.autograd.grad(log_z.sum(), emissions)
        return emissions.detach(), marg

    def validation_step(self, batch, batch_idx):
        x, tags = batch
        # gradients are needed here even though we are evaluating
        with torch.inference_mode(False), torch.enable_grad():
            emissions, marg = self.marginals(x)
        pred = self.crf.viterbi(emissions)
        self.log("val_acc", (pred == tags).float().mean())
        self.log("val_expected_acc", marg.gather(2, tags.unsqueeze(2)).mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.cfg.lr)


def make_split(n, cfg, prototypes, T=12):
    tags = torch.zeros(n, T, dtype=torch.long)
    tags[:, 0] = torch.randint(0, cfg.num_tags, (n,))
    for t in range(1, T):
        stay = torch.rand(n) < 0.7
        tags[:, t] = torch.where(stay, tags[:, t - 1], torch.randint(0, cfg.num_tags, (n,)))
    x = prototypes[tags] + 0.8 * torch.randn(n, T, cfg.vocab_dim)
    return TensorDataset(x, tags)


cfg = TaggerConfig()
prototypes = torch.randn(cfg.num_tags, cfg.vocab_dim)
train_loader = DataLoader(make_split(256, cfg, prototypes), batch_size=32, shuffle=True)
val_loader = DataLoader(make_split(64, cfg, prototypes), batch_size=32)

model = CRFTagger(cfg)
trainer = Trainer(max_epochs=3)
trainer.fit(model, train_dataloaders=train_loader)
metrics = trainer.validate(model, dataloaders=val_loader)
print({k: round(v, 4) for k, v in metrics.items()})
