# expect: clean
# source: https://github.com/MorvanZhou/PyTorch-Tutorial/issues/57
"""Streaming sin -> cos regressor with an RNN whose hidden state is carried across windows."""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="streaming RNN regressor")
    p.add_argument("--time-step", type=int, default=10)
    p.add_argument("--input-size", type=int, default=1)
    p.add_argument("--hidden-size", type=int, default=32)
    p.add_argument("--num-layers", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--windows", type=int, default=40)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv if argv is not None else [])


class SineStream:
    """Yields consecutive windows of one long signal so that state carries over."""

    def __init__(self, time_step, noise=0.01):
        self.time_step = time_step
        self.noise = noise
        self.cursor = 0

    def __iter__(self):
        return self

    def __next__(self):
        start, end = self.cursor * math.pi, (self.cursor + 1) * math.pi
        self.cursor += 1
        steps = np.linspace(start, end, self.time_step, dtype=np.float32)
        x = np.sin(steps) + self.noise * np.random.randn(self.time_step).astype(np.float32)
        y = np.cos(steps)
        x = torch.from_numpy(x[np.newaxis, :, np.newaxis].astype(np.float32))
        y = torch.from_numpy(y[np.newaxis, :, np.newaxis].astype(np.float32))
        return steps, x, y


class RNNRegressor(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.rnn = nn.RNN(input_size=input_size, hidden_size=hidden_size,
                          num_layers=num_layers, batch_first=True)
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, x, h_state):
        r_out, h_state = self.rnn(x, h_state)
        outs = [self.out(r_out[:, t, :]) for t in range(r_out.size(1))]
        return torch.stack(outs, dim=1), h_state


class StreamingForecaster(nn.Module):
    """Wraps the regressor and remembers the last hidden state between calls."""

    def __init__(self, core):
        super().__init__()
        self.core = core
        self._state = None
        self.calls = 0

    @property
    def state(self):
        return self._state

    @state.setter
    def state(self, value):
        self._state = value

    def reset(self):
        self._state = None

    def forward(self, x):
        pred, h = self.core(x, self.state)
        self.state = h.detach()
        self.calls += 1
        return pred


class EarlyStopper:
    def __init__(self, patience=20, min_delta=1e-4):
        self.best = float("inf")
        self.bad = 0
        self.patience = patience
        self.min_delta = min_delta

    def step(self, value):
        if value < self.best - self.min_delta:
            self.best = value
            self.bad = 0
        else:
            self.bad += 1
        return self.bad >= self.patience


def train(args):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    core = RNNRegressor(args.input_size, args.hidden_size, args.num_layers)
    model = StreamingForecaster(core)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_func = nn.MSELoss()
    stopper = EarlyStopper()
    stream = SineStream(args.time_step)
    history = []
    t0 = time.time()
    for window in range(args.windows):
        steps, x, y = next(stream)
        prediction = model(x)
        loss = loss_func(prediction, y)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        history.append(loss.item())
        if window % args.log_every == 0:
            print("window %3d  loss %.5f  |h| %.3f" % (
                window, loss.item(), model.state.abs().mean().item()))
        if stopper.step(loss.item()):
            print("early stop at window", window)
            break
    print("final loss %.5f after %d windows (%.2fs)" % (history[-1], len(history), time.time() - t0))
    return history


def evaluate(model, n_windows=5, time_step=10):
    model.reset()
    stream = SineStream(time_step, noise=0.0)
    errs = []
    with torch.no_grad():
        for _ in range(n_windows):
            _, x, y = next(stream)
            errs.append(((model(x) - y) ** 2).mean().item())
    return float(np.mean(errs))


if __name__ == "__main__":
    train(parse_args())
