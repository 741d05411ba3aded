# expect: clean
# source: https://github.com/inferno-pytorch/inferno/issues/195
"""Variational autoencoder for small microscopy-like cell images, trained with an
inferno-style Trainer (build_criterion / build_optimizer / build_logger, callback
engine, frequencies), logging scalars and images to a TensorBoard-like writer.
"""
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ------------------------------------------------------------ inferno.utils
class Frequency:
    def __init__(self, value, units):
        self.value, self.units = value, units.rstrip('s')

    @classmethod
    def build_from(cls, args):
        return args if isinstance(args, Frequency) else cls(*args)

    def match(self, iteration_count=None, epoch_count=None):
        count = iteration_count if self.units == 'iteration' else epoch_count
        return count is not None and count > 0 and count % self.value == 0


class InMemoryWriter:
    """Stands in for tensorboardX.SummaryWriter (keeps everything in memory)."""

    def __init__(self):
        self.scalars = defaultdict(list)
        self.images = defaultdict(list)

    def add_scalar(self, tag, value, global_step):
        self.scalars[tag].append((global_step, float(value)))

    def add_image(self, tag, img, global_step):
        self.images[tag].append((global_step, np.asarray(img).shape))


# -------------------------------------------------------- inferno callbacks
class Callback:
    def __init__(self):
        self.trainer = None

    def bind_trainer(self, trainer):
        self.trainer = trainer
        return self


class CallbackEngine:
    END_OF_TRAINING_ITERATION = 'end_of_training_iteration'
    END_OF_EPOCH = 'end_of_epoch'

    def __init__(self):
        self._callback_registry = defaultdict(list)

    def register_callback(self, callback, trigger):
        self._callback_registry[trigger].append(callback)

    def call(self, trigger, **kwargs):
        for callback in self._callback_registry[trigger]:
            getattr(callback, trigger)(**kwargs)


class TensorboardLogger(Callback):
    def __init__(self, log_scalars_every=None, log_images_every=None, send_image_at_batch_indices='all'):
        super().__init__()
        self.writer = InMemoryWriter()
        self.log_scalars_every = Frequency.build_from(log_scalars_every or (1, 'iteration'))
        self.log_images_every = Frequency.build_from(log_images_every or (1, 'epoch'))
        self.send_image_at_batch_indices = send_image_at_batch_indices

    def extract_images_from_batch(self, batch):
        # Convert to numpy
        batch = batch.detach().float().cpu().numpy()
        if self.send_image_at_batch_indices == 'all':
            indices = range(batch.shape[0])
        else:
            indices = self.send_image_at_batch_indices
        images = []
        for idx in indices:
            img = batch[idx]
            img = (img - img.min()) / max(img.max() - img.min(), 1e-6)
            images.append(img)
        return images

    def log_object(self, tag, object_, allow_scalar_logging=True, allow_image_logging=True):
        step = self.trainer.iteration_count
        if isinstance(object_, torch.Tensor) and object_.dim() == 0 and allow_scalar_logging:
            self.writer.add_scalar(tag, object_.item(), step)
        elif isinstance(object_, (int, float)) and allow_scalar_logging:
            self.writer.add_scalar(tag, object_, step)
        elif isinstance(object_, torch.Tensor) and object_.dim() == 4 and allow_image_logging:
            for i, image in enumerate(self.extract_images_from_batch(object_)):
                self.writer.add_image(f"{tag}/{i}", image, step)

    def end_of_training_iteration(self, **_):
        it = self.trainer.iteration_count
        log_scalars_now = self.log_scalars_every.match(iteration_count=it)
        log_images_now = self.log_images_every.match(iteration_count=it)
        for key in ['training_loss', 'training_inputs', 'training_prediction']:
            self.log_object(key, self.trainer.get_state(key),
                            allow_scalar_logging=log_scalars_now,
                            allow_image_logging=log_images_now)

    def end_of_epoch(self, **_):
        self.log_object('validation_loss', self.trainer.get_state('validation_loss'))


# ---------------------------------------------------------------- model
class ConvVAE(nn.Module):
    def __init__(self, latent_dim=6):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 8, 3, 2, 1), nn.ReLU(),
                                 nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(), nn.Flatten())
        self.fc_mu = nn.Linear(16 * 4 * 4, latent_dim)
        self.fc_logvar = nn.Linear(16 * 4 * 4, latent_dim)
        self.fc_dec = nn.Linear(latent_dim, 16 * 4 * 4)
        self.dec = nn.Sequential(nn.ConvTranspose2d(16, 8, 4, 2, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(8, 1, 4, 2, 1))
        self.last_stats = None

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        self.last_stats = (mu, logvar)
        return torch.sigmoid(self.dec(self.fc_dec(z).view(-1, 16, 4, 4)))

    def loss_function(self):
        model = self

        class VAELoss(nn.Module):
            def forward(self, recon, target):
                mu, logvar = model.last_stats
                bce = F.binary_cross_entropy(recon, target, reduction='sum') / target.shape[0]
                kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / target.shape[0]
                return bce + kld

        return VAELoss()


# ---------------------------------------------------------------- trainer
class Trainer:
    def __init__(self, model):
        self.model = model
        self.callbacks = CallbackEngine()
        self._state = {}
        self.iteration_count = 0
        self.epoch_count = 0
        self.max_num_epochs = 1

    def build_criterion(self, criterion):
        self.criterion = criterion
        return self

    def build_optimizer(self, name, **kwargs):
        self.optimizer = getattr(torch.optim, name)(self.model.parameters(), **kwargs)
        return self

    def build_logger(self, logger):
        logger.bind_trainer(self)
        self.callbacks.register_callback(logger, CallbackEngine.END_OF_TRAINING_ITERATION)
        self.callbacks.register_callback(logger, CallbackEngine.END_OF_EPOCH)
        return self

    def set_max_num_epochs(self, n):
        self.max_num_epochs = n
        return self

    def update_state(self, key, value):
        self._state[key] = value

    def get_state(self, key, default=None):
        return self._state.get(key, default)

    def apply_model_and_loss(self, inputs, target):
        prediction = self.model(inputs)
        loss = self.criterion(prediction, target)
        return prediction, loss

    def train_for(self, loader):
        self.model.train()
        for inputs in loader:
            self.optimizer.zero_grad()
            prediction, loss = self.apply_model_and_loss(inputs, inputs)
            loss.backward()
            self.optimizer.step()
            self.update_state('training_inputs', inputs)
            self.update_state('training_prediction', prediction)
            self.update_state('training_loss', loss.detach())
            self.callbacks.call(CallbackEngine.END_OF_TRAINING_ITERATION)
            self.iteration_count += 1

    def validate_for(self, loader):
        self.model.eval()
        with torch.no_grad():
            losses = [self.apply_model_and_loss(x, x)[1].item() for x in loader]
        self.update_state('validation_loss', float(np.mean(losses)))

    def fit(self, train_loader, val_loader):
        for _ in range(self.max_num_epochs):
            self.train_for(train_loader)
            self.validate_for(val_loader)
            self.callbacks.call(CallbackEngine.END_OF_EPOCH)
            self.epoch_count += 1
        return self


def make_cells(n, rng, size=16):
    yy, xx = np.mgrid[0:size, 0:size]
    imgs = np.zeros((n, 1, size, size), dtype=np.float32)
    for k in range(n):
        cy, cx, r = rng.uniform(5, 11), rng.uniform(5, 11), rng.uniform(2, 4)
        imgs[k, 0] = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r ** 2))
    return torch.from_numpy(np.clip(imgs + 0.05 * rng.rand(*imgs.shape), 0, 1).astype(np.float32))


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    data = make_cells(48, rng)
    train_loader = [data[i:i + 8] for i in range(0, 32, 8)]
    val_loader = [data[i:i + 8] for i in range(32, 48, 8)]

    vae = ConvVAE()
    trainer = Trainer(vae)
    trainer.build_criterion(vae.loss_function())
    trainer.build_optimizer('Adam', lr=0.001)
    trainer.set_max_num_epochs(2)
    logger = TensorboardLogger(log_scalars_every=(1, 'iteration'),
                               log_images_every=(2, 'iterations'),
                               send_image_at_batch_indices=[0, 1])
    trainer.build_logger(logger)
    trainer.fit(train_loader, val_loader)
    print("logged scalars:", {k: len(v) for k, v in logger.writer.scalars.items()})
    print("logged images:", len(logger.writer.images))


main()
