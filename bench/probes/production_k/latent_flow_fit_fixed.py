# expect: clean
# source: https://github.com/davidnabergoj/torchflows/issues/8
"""Probabilistic autoencoder: an autoencoder whose latent space is modelled
by a normalizing flow (affine coupling layers) fitted after reconstruction
training.
"""
from copy import deepcopy
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


# ---------------------------------------------------------------- utils
def get_batch_shape(x: torch.Tensor, event_shape) -> torch.Size:
    return x.shape[:len(x.shape) - len(event_shape)]


def create_data_loader(x: torch.Tensor, weights: Optional[torch.Tensor], context: Optional[torch.Tensor],
                       label: str, event_shape, **kwargs):
    """Creates a DataLoader object for NF training."""
    assert label in ["training", "validation", "testing"]
    if weights is None:
        weights = torch.ones(size=get_batch_shape(x, event_shape))
    if len(x) != len(weights):
        raise ValueError(f"Expected same number of {label} data and {label} weights, "
                         f"but found {len(x)} and {len(weights)}")
    dataset = TensorDataset(x, weights) if context is None else TensorDataset(x, weights, context)
    return DataLoader(dataset, **kwargs)


# ---------------------------------------------------------------- bijections
class Bijection(nn.Module):
    def __init__(self, event_shape):
        super().__init__()
        self.event_shape = event_shape

    def forward(self, x, context=None) -> Tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def inverse(self, z, context=None) -> Tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class AffineCoupling(Bijection):
    def __init__(self, event_shape, hidden=32, flip=False):
        super().__init__(event_shape)
        d = event_shape[0]
        self.d1 = d // 2
        self.flip = flip
        self.conditioner = nn.Sequential(nn.Linear(self.d1, hidden), nn.Tanh(),
                                         nn.Linear(hidden, 2 * (d - self.d1)))
        nn.init.zeros_(self.conditioner[-1].weight)
        nn.init.zeros_(self.conditioner[-1].bias)

    def _split(self, x):
        if self.flip:
            x = x.flip(-1)
        return x[..., :self.d1], x[..., self.d1:]

    def _merge(self, a, b):
        out = torch.cat([a, b], dim=-1)
        return out.flip(-1) if self.flip else out

    def forward(self, x, context=None):
        a, b = self._split(x)
        log_scale, shift = self.conditioner(a).chunk(2, dim=-1)
        log_scale = torch.tanh(log_scale)
        z = self._merge(a, b * torch.exp(log_scale) + shift)
        return z, log_scale.sum(-1)

    def inverse(self, z, context=None):
        a, b = self._split(z)
        log_scale, shift = self.conditioner(a).chunk(2, dim=-1)
        log_scale = torch.tanh(log_scale)
        x = self._merge(a, (b - shift) * torch.exp(-log_scale))
        return x, -log_scale.sum(-1)


class BijectiveComposition(Bijection):
    def __init__(self, event_shape, layers):
        super().__init__(event_shape)
        self.layers = nn.ModuleList(layers)

    def forward(self, x, context=None):
        log_det = torch.zeros(get_batch_shape(x, self.event_shape))
        for layer in self.layers:
            x, ld = layer(x, context=context)
            log_det = log_det + ld
        return x, log_det

    def inverse(self, z, context=None):
        log_det = torch.zeros(get_batch_shape(z, self.event_shape))
        for layer in reversed(self.layers):
            z, ld = layer.inverse(z, context=context)
            log_det = log_det + ld
        return z, log_det


class RealNVP(BijectiveComposition):
    def __init__(self, event_shape, n_layers=4, hidden=32):
        super().__init__(event_shape, [AffineCoupling(event_shape, hidden, flip=i % 2 == 1)
                                       for i in range(n_layers)])


# ---------------------------------------------------------------- flows
class BaseFlow(nn.Module):
    def __init__(self, event_shape):
        super().__init__()
        self.event_shape = event_shape
        self.event_size = int(torch.prod(torch.as_tensor(event_shape)))
        self.register_buffer('loc', torch.zeros(self.event_size))
        self.register_buffer('covariance_matrix', torch.eye(self.event_size))

    def get_device(self):
        return self.loc.device

    @property
    def base(self) -> torch.distributions.Distribution:
        return torch.distributions.MultivariateNormal(loc=self.loc, covariance_matrix=self.covariance_matrix)

    def base_log_prob(self, z: torch.Tensor):
        return self.base.log_prob(z.reshape(-1, self.event_size))

    def base_sample(self, sample_shape: Union[torch.Size, Tuple[int, ...]]):
        return self.base.sample(sample_shape)

    def regularization(self):
        return 0.0

    def fit(self, x_train: torch.Tensor, n_epochs: int = 20, lr: float = 0.01,
            batch_size: int = 1024, shuffle: bool = True, show_progress: bool = False,
            w_train: torch.Tensor = None, context_train: torch.Tensor = None,
            x_val: torch.Tensor = None, keep_best_weights: bool = True):
        """Fit the normalizing flow by maximizing the probability of training data."""
        self.train()
        if batch_size is None:
            batch_size = len(x_train)
        train_loader = create_data_loader(x_train, w_train, context_train, "training",
                                          batch_size=batch_size, shuffle=shuffle,
                                          event_shape=self.event_shape)
        if x_val is not None:
            val_loader = create_data_loader(x_val, None, None, "validation", batch_size=batch_size,
                                            shuffle=False, event_shape=self.event_shape)
            best_val_loss = torch.inf
            best_weights = deepcopy(self.state_dict())

        def compute_batch_loss(batch_, reduction: callable = torch.mean):
            batch_x, batch_weights = batch_[:2]
            batch_context = batch_[2] if len(batch_) == 3 else None
            batch_log_prob = self.log_prob(batch_x.to(self.get_device()), context=batch_context)
            batch_weights = batch_weights.to(self.get_device())
            assert batch_log_prob.shape == batch_weights.shape
            return -reduction(batch_log_prob * batch_weights) / self.event_size

        optimizer = torch.optim.AdamW(self.parameters(), lr=lr)
        val_loss = None
        self.history = []

        for epoch in range(n_epochs):
            for train_batch in train_loader:
                optimizer.zero_grad()
                train_loss = compute_batch_loss(train_batch, reduction=torch.mean)
                train_loss += self.regularization()
                train_loss.backward()
                optimizer.step()
                self.history.append(float(train_loss))
                if show_progress:
                    print(f'epoch {epoch}: training loss (batch) {train_loss:.4f}, validation {val_loss}')

            if x_val is not None:
                with torch.no_grad():
                    val_loss = 0.0
                    for val_batch in val_loader:
                        val_loss += compute_batch_loss(val_batch, reduction=torch.sum) / len(val_batch[0])
                    if val_loss < best_val_loss:
                        best_val_loss = val_loss
                        if keep_best_weights:
                            best_weights = deepcopy(self.state_dict())

        if x_val is not None and keep_best_weights:
            self.load_state_dict(best_weights)
        self.eval()


class Flow(BaseFlow):
    def __init__(self, bijection: Bijection):
        super().__init__(event_shape=bijection.event_shape)
        self.register_module('bijection', bijection)

    def forward_with_log_prob(self, x: torch.Tensor, context: torch.Tensor = None):
        z, log_det = self.bijection.forward(x.to(self.get_device()), context=context)
        return z, self.base_log_prob(z) + log_det

    def log_prob(self, x: torch.Tensor, context: torch.Tensor = None):
        return self.forward_with_log_prob(x, context)[1]

    def sample(self, n: int, context: torch.Tensor = None):
        z = self.base_sample((n,))
        x, _ = self.bijection.inverse(z, context=context)
        return x


# ---------------------------------------------------------------- autoencoder
class Autoencoder(nn.Module):
    def __init__(self, data_dim=20, latent_dim=6, hidden=64):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(data_dim, hidden), nn.ReLU(), nn.Linear(hidden, latent_dim))
        self.decoder = nn.Sequential(nn.Linear(latent_dim, hidden), nn.ReLU(), nn.Linear(hidden, data_dim))

    def forward(self, x):
        return self.decoder(self.encoder(x))


class ProbabilisticAutoencoder:
    """Stage 1: reconstruction training. Stage 2: density model on latents."""

    def __init__(self, data_dim, latent_dim, seed=0):
        torch.manual_seed(seed)
        self.model = Autoencoder(data_dim, latent_dim)
        self.flow = Flow(RealNVP(event_shape=(latent_dim,), n_layers=4))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def train_autoencoder(self, x, epochs=30, batch_size=64):
        g = torch.Generator().manual_seed(1)
        for _ in range(epochs):
            perm = torch.randperm(len(x), generator=g)
            for i in range(0, len(x), batch_size):
                xb = x[perm[i:i + batch_size]]
                loss = ((self.model(xb) - xb) ** 2).mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        return loss.item()

    def encode(self, x):
        self.model.eval()
        return self.model.encoder(x)

    def fit_latent_density(self, x):
        latent = self.encode(x)
        self.flow.fit(latent.detach(), n_epochs=5, lr=5e-3, batch_size=64)
        return self.flow.history[-1]

    def generate(self, n):
        with torch.no_grad():
            return self.model.decoder(self.flow.sample(n))


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    mix = torch.randn(256, 3, generator=g)
    data = torch.cat([torch.sin(mix @ torch.randn(3, 10, generator=g)),
                      torch.tanh(mix @ torch.randn(3, 10, generator=g))], dim=1)
    pae = ProbabilisticAutoencoder(data_dim=20, latent_dim=6)
    print('reconstruction', pae.train_autoencoder(data))
    print('flow nll', pae.fit_latent_density(data))
    print('samples', pae.generate(4).shape)
