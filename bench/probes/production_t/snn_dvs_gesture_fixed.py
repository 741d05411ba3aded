# expect: clean
# source: https://github.com/synsense/sinabs/issues/5
"""Spiking CNN for event-camera (DVS) gesture recognition trained with BPTT.

Mirrors the layout of a sinabs-style library: a StatefulLayer base class
that keeps membrane potentials as registered buffers (so they move with the
module and can be reset between samples), leaky integrate-and-fire layers
with a surrogate-gradient spike function, a network wrapper with
reset_states(), and a Trainer that feeds binned event frames time step by
time step, with Adam + cosine LR schedule and simple callbacks.
"""
import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


CONFIG = SimpleNamespace(
    model=SimpleNamespace(channels=(2, 8, 16), num_classes=4, tau_mem=8.0, spike_threshold=1.0),
    data=SimpleNamespace(batch_size=4, time_steps=6, height=16, width=16, event_rate=0.08),
    optim=SimpleNamespace(lr=2e-3, weight_decay=0.0, epochs=2, steps_per_epoch=3),
    seed=3,
)


class SingleSpike(torch.autograd.Function):
    """Heaviside spike with a fast-sigmoid surrogate gradient."""

    @staticmethod
    def forward(ctx, v_mem, threshold):
        ctx.save_for_backward(v_mem)
        ctx.threshold = threshold
        return (v_mem >= threshold).float()

    @staticmethod
    def backward(ctx, grad_output):
        (v_mem,) = ctx.saved_tensors
        sg = 1.0 / (1.0 + 10.0 * (v_mem - ctx.threshold).abs()) ** 2
        return grad_output * sg, None


class StatefulLayer(nn.Module):
    """Base class for layers that carry state across time steps in buffers."""

    def __init__(self, state_names):
        super().__init__()
        for name in state_names:
            self.register_buffer(name, torch.zeros((0,)))

    def is_state_initialised(self):
        return all(buf.numel() > 0 for buf in self.buffers())

    def state_has_shape(self, shape):
        return all(buf.shape == shape for buf in self.buffers())

    def init_state_with_shape(self, shape, randomize=False):
        for name, buffer in self.named_buffers():
            self.register_buffer(name, torch.zeros(shape, device=buffer.device))
        self.reset_states(randomize=randomize)

    def reset_states(self, randomize=False):
        """
        Reset the state/buffers in a layer.
        """
        if self.is_state_initialised():
            for buffer in self.buffers():
                if randomize:
                    torch.nn.init.uniform_(buffer).detach_()
                else:
                    buffer.zero_().detach_()


class LIF(StatefulLayer):
    def __init__(self, tau_mem, spike_threshold=1.0):
        super().__init__(state_names=["v_mem"])
        self.alpha_mem = math.exp(-1.0 / tau_mem)
        self.spike_threshold = spike_threshold
        self.firing_rate = 0.0

    def forward(self, x):
        if not self.is_state_initialised() or not self.state_has_shape(x.shape):
            self.init_state_with_shape(x.shape)
        v_mem = self.alpha_mem * self.v_mem + (1 - self.alpha_mem) * x
        spikes = SingleSpike.apply(v_mem, self.spike_threshold)
        v_mem = v_mem - spikes * self.spike_threshold
        self.v_mem = v_mem
        self.firing_rate = spikes.mean().item()
        return spikes


class SpikingGestureNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c0, c1, c2 = cfg.channels
        self.conv1 = nn.Conv2d(c0, c1, 3, padding=1, bias=False)
        self.lif1 = LIF(cfg.tau_mem, cfg.spike_threshold)
        self.pool1 = nn.AvgPool2d(2)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, bias=False)
        self.lif2 = LIF(cfg.tau_mem, cfg.spike_threshold)
        self.pool2 = nn.AvgPool2d(2)
        self.fc = nn.Linear(c2 * 4 * 4, cfg.num_classes, bias=False)
        self.lif_out = LIF(cfg.tau_mem, cfg.spike_threshold)

    def forward(self, frame):
        x = self.pool1(self.lif1(self.conv1(frame)))
        x = self.pool2(self.lif2(self.conv2(x)))
        x = self.fc(x.flatten(1))
        self.lif_out(x)
        return self.lif_out.v_mem

    def reset_states(self):
        for m in self.modules():
            if isinstance(m, StatefulLayer):
                m.reset_states()

    @property
    def firing_rates(self):
        return {n: m.firing_rate for n, m in self.named_modules() if isinstance(m, LIF)}


class SyntheticDVSGesture:
    """Random polarity event streams binned into (T, B, 2, H, W) frames."""

    def __init__(self, cfg, num_classes, seed):
        self.cfg = cfg
        self.num_classes = num_classes
        self.gen = torch.Generator().manual_seed(seed)

    def batch(self):
        c = self.cfg
        labels = torch.randint(0, self.num_classes, (c.batch_size,), generator=self.gen)
        frames = (torch.rand(c.time_steps, c.batch_size, 2, c.height, c.width, generator=self.gen) < c.event_rate).float()
        for b, y in enumerate(labels.tolist()):
            col = (y * c.width) // self.num_classes
            frames[:, b, y % 2, :, col:col + 2] += 1.0
        return frames, labels


class FiringRateLogger:
    def __call__(self, trainer, step, loss):
        trainer.logs.append((step, loss, trainer.model.firing_rates))


class Trainer:
    def __init__(self, model, cfg, callbacks=()):
        self.model = model
        self.cfg = cfg
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        total = cfg.optim.epochs * cfg.optim.steps_per_epoch
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=total)
        self.callbacks = list(callbacks)
        self.logs = []
        self.global_step = 0

    def run_sequence(self, frames):
        out = []
        for t in range(frames.shape[0]):
            out.append(self.model(frames[t]))
        return torch.stack(out).mean(0)

    def train_step(self, frames, labels):
        self.model.train()
        self.model.reset_states()
        self.optimizer.zero_grad()
        logits = self.run_sequence(frames)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.global_step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self, data, n_batches=2):
        self.model.eval()
        correct = total = 0
        for _ in range(n_batches):
            frames, labels = data.batch()
            self.model.reset_states()
            pred = self.run_sequence(frames).argmax(-1)
            correct += (pred == labels).sum().item()
            total += labels.numel()
        return correct / total

    def fit(self, train_data, val_data):
        for epoch in range(self.cfg.optim.epochs):
            losses = []
            for _ in range(self.cfg.optim.steps_per_epoch):
                frames, labels = train_data.batch()
                loss = self.train_step(frames, labels)
                losses.append(loss)
                for cb in self.callbacks:
                    cb(self, self.global_step, loss)
            acc = self.evaluate(val_data)
            print(f"epoch {epoch}: loss {np.mean(losses):.4f} val_acc {acc:.3f}")


def main():
    cfg = CONFIG
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    model = SpikingGestureNet(cfg.model)
    train_data = SyntheticDVSGesture(cfg.data, cfg.model.num_classes, cfg.seed)
    val_data = SyntheticDVSGesture(cfg.data, cfg.model.num_classes, cfg.seed + 100)
    trainer = Trainer(model, cfg, callbacks=[FiringRateLogger()])
    trainer.fit(train_data, val_data)


if __name__ == "__main__":
    main()
