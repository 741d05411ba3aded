# expect: clean
# source: https://github.com/pytorchbearer/torchbearer/issues/414
"""GAN training on a torchbearer-style `Trial` with criterion=None.

A minimal re-implementation of the torchbearer machinery (state keys,
callback list, `add_to_loss` / `on_sample` decorators, `Trial.with_generators`
/ `run`) drives a 1-D GAN: the discriminator is updated by its own callback
with its own optimizer, and the generator loss is added to the trial loss by
a callback once the discriminator warm-up is over.  Synthetic data, CPU only.
"""
import functools
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# torchbearer-like core
# ----------------------------------------------------------------------------
MODEL, OPTIMIZER, CRITERION, DEVICE, DATA_TYPE = "model", "optimizer", "criterion", "device", "dtype"
X, Y_TRUE, Y_PRED, LOSS, EPOCH, BATCH, STEPS = "x", "y_true", "y_pred", "loss", "epoch", "t", "steps"
GENERATOR, ITERATOR, METRICS, CALLBACK_LIST, STOP_TRAINING = "generator", "iterator", "metrics", "callback_list", "stop_training"
BACKWARD_ARGS = "backward_args"


class Callback(object):
    def on_start_training(self, state): pass
    def on_sample(self, state): pass
    def on_forward(self, state): pass
    def on_criterion(self, state): pass
    def on_backward(self, state): pass
    def on_step_training(self, state): pass
    def on_end_epoch(self, state): pass


class CallbackList(Callback):
    def __init__(self, callbacks):
        self.callbacks = list(callbacks)

    def _for_all(self, name, state):
        for cb in self.callbacks:
            getattr(cb, name)(state)

    def __getattribute__(self, name):
        if name.startswith("on_"):
            return functools.partial(object.__getattribute__(self, "_for_all"), name)
        return object.__getattribute__(self, name)


class _LambdaCallback(Callback):
    def __init__(self, hook, fn):
        setattr(self, hook, fn)


def on_sample(fn):
    return _LambdaCallback("on_sample", fn)


def add_to_loss(fn):
    def _on_criterion(state):
        state[LOSS] = state[LOSS] + fn(state)
    return _LambdaCallback("on_criterion", _on_criterion)


def only_if(predicate):
    def decorator(cb):
        for hook in [h for h in dir(Callback) if h.startswith("on_")]:
            inner = getattr(cb, hook)
            def guarded(state, _inner=inner):
                if predicate(state):
                    _inner(state)
            setattr(cb, hook, guarded)
        return cb
    return decorator


class Trial(object):
    def __init__(self, model, optimizer=None, criterion=None, callbacks=(), verbose=1):
        if criterion is None:
            def criterion(_, __):
                return torch.zeros(1, device=self.state[DEVICE], dtype=self.state[DATA_TYPE], requires_grad=True)
        self.verbose = verbose
        self.state = {
            MODEL: model, OPTIMIZER: optimizer, CRITERION: criterion,
            DEVICE: torch.device("cpu"), DATA_TYPE: torch.float32,
            CALLBACK_LIST: CallbackList(callbacks), BACKWARD_ARGS: {},
            STOP_TRAINING: False, METRICS: {},
        }

    def with_generators(self, train_generator, train_steps):
        self.state[GENERATOR] = train_generator
        self.state[STEPS] = train_steps
        return self

    def _sample(self, state):
        state[X], state[Y_TRUE] = next(state[ITERATOR])

    def _fit_pass(self, state):
        state[MODEL].train()
        state[ITERATOR] = iter(state[GENERATOR])
        state[CALLBACK_LIST].on_start_training(state)
        running = []
        for state[BATCH] in range(0, state[STEPS]):
            self._sample(state)
            state[CALLBACK_LIST].on_sample(state)

            def closure():
                state[OPTIMIZER].zero_grad()
                state[Y_PRED] = state[MODEL](state[X])
                state[CALLBACK_LIST].on_forward(state)
                state[LOSS] = state[CRITERION](state[Y_PRED], state[Y_TRUE])
                state[CALLBACK_LIST].on_criterion(state)
                state[LOSS].backward(**state[BACKWARD_ARGS])
                state[CALLBACK_LIST].on_backward(state)

            state[OPTIMIZER].step(closure)
            running.append(float(state[LOSS].detach().sum()))
            state[CALLBACK_LIST].on_step_training(state)
            if state[STOP_TRAINING]:
                break
        state[METRICS]["running_loss"] = float(np.mean(running))
        return state

    def run(self, epochs=1):
        state = self.state
        for state[EPOCH] in range(epochs):
            self._fit_pass(state)
            state[CALLBACK_LIST].on_end_epoch(state)
            if self.verbose:
                print("epoch %d: %s" % (state[EPOCH], state[METRICS]))
        return state


# ----------------------------------------------------------------------------
# GAN example
# ----------------------------------------------------------------------------
cfg = SimpleNamespace(latent_dim=4, data_dim=2, batch_size=32, steps=6, epochs=3,
                      lr=2e-4, d_warmup_epochs=1, seed=0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(cfg.latent_dim, 32), nn.ReLU(), nn.Linear(32, cfg.data_dim))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(cfg.data_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)


def real_data_generator(rng):
    while True:
        centers = np.array([[1.0, 1.0], [-1.0, -1.0]], dtype=np.float32)
        idx = rng.randint(0, 2, size=cfg.batch_size)
        real = centers[idx] + 0.1 * rng.randn(cfg.batch_size, cfg.data_dim).astype(np.float32)
        z = rng.randn(cfg.batch_size, cfg.latent_dim).astype(np.float32)
        yield torch.from_numpy(z), torch.from_numpy(real)


class DiscriminatorUpdate(Callback):
    """Updates the discriminator from the freshly sampled batch."""

    def __init__(self, generator, discriminator):
        self.generator = generator
        self.discriminator = discriminator
        self.optimizer = torch.optim.Adam(discriminator.parameters(), lr=cfg.lr, betas=(0.5, 0.999))
        self.history = []

    def on_sample(self, state):
        with torch.no_grad():
            fake = self.generator(state[X])
        real = state[Y_TRUE]
        d_real, d_fake = self.discriminator(real), self.discriminator(fake)
        loss = F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real)) + \
            F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.history.append(loss.item())


def make_generator_loss(discriminator):
    @only_if(lambda state: state[EPOCH] >= cfg.d_warmup_epochs)
    @add_to_loss
    def generator_loss(state):
        d_fake = discriminator(state[Y_PRED])
        return F.binary_cross_entropy_with_logits(d_fake, torch.ones_like(d_fake))
    return generator_loss


def main():
    torch.manual_seed(cfg.seed)
    rng = np.random.RandomState(cfg.seed)
    gen, disc = Generator(), Discriminator()
    d_update = DiscriminatorUpdate(gen, disc)
    g_optimizer = torch.optim.Adam(gen.parameters(), lr=cfg.lr, betas=(0.5, 0.999))
    trial = Trial(gen, g_optimizer, criterion=None, callbacks=[d_update, make_generator_loss(disc)])
    trial.with_generators(real_data_generator(rng), train_steps=cfg.steps)
    state = trial.run(epochs=cfg.epochs)
    with torch.no_grad():
        sample = gen(torch.randn(256, cfg.latent_dim))
    print("final d loss %.4f, sample mean %s" % (d_update.history[-1], sample.mean(0).tolist()))
    assert np.isfinite(state[METRICS]["running_loss"])


if __name__ == "__main__":
    main()
