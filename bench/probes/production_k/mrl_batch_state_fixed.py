# expect: clean
# source: https://github.com/DarkMatterAI/mrl/issues/14
"""Callback-driven policy-gradient fine-tuning of a small autoregressive
sequence generator (molecule-RL style: Environment + Agent + Sampler +
Reward + Loss callbacks communicating through a shared BatchState).
"""
import copy
import os
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

USE_CUDA = torch.cuda.is_available()
os.environ.setdefault('use_cuda', 'cuda' if USE_CUDA else 'cpu')


# ---------------------------------------------------------------- torch_core
def get_device():
    if torch.cuda.is_available() and os.environ['use_cuda'] == 'cuda':
        return torch.device(torch.cuda.current_device())
    return torch.device('cpu')


def to_device(tensor, device=None):
    device = get_device() if device is None else torch.device(device)
    if hasattr(tensor, 'to'):
        return tensor.to(device)
    return [to_device(i, device) for i in tensor]


def whiten(values, mask=None, shift_mean=True):
    if mask is None:
        mean, var = values.mean(), values.var()
    else:
        mean = (values * mask).sum() / mask.sum()
        var = (((values - mean) * mask) ** 2).sum() / mask.sum()
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def discount_rewards(rewards, gamma):
    out = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        out[:, t] = running
    return out


# ---------------------------------------------------------------- callback core
class Callback():
    def __init__(self, name='base_callback', order=10):
        self.order = order
        self.name = name
        self.event_timelog = defaultdict(list)

    def __call__(self, event_name):
        start = time.time()
        event = getattr(self, event_name, None)
        output = event() if event is not None else None
        self.event_timelog[event_name].append(time.time() - start)
        return output

    def __repr__(self):
        return self.name


class SettrDict(dict):
    def __init__(self):
        super().__init__()

    def __setitem__(self, key, item):
        super().__setitem__(key, item)
        super().__setattr__(key, item)

    def __setattr__(self, key, item):
        super().__setitem__(key, item)
        super().__setattr__(key, item)


class BatchState(SettrDict):
    def __init__(self):
        super().__init__()
        self.samples = []
        self.sources = []
        self.rewards = to_device(torch.tensor(0.))
        self.loss = torch.tensor(0., requires_grad=True)
        self.loss = to_device(self.loss.clone())
        self.latent_data = {}


class Log(Callback):
    def __init__(self):
        super().__init__(name='log', order=100)
        self.metrics = defaultdict(list)
        self.iterations = 0

    def add_metric(self, name):
        self.metrics[name] = []

    def update_metric(self, name, value):
        self.metrics[name].append(float(np.mean(value)))

    def after_batch(self):
        self.iterations += 1


# ---------------------------------------------------------------- model + agent
class SequenceModel(nn.Module):
    def __init__(self, vocab=8, d_emb=16, d_hidden=32):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_emb)
        self.rnn = nn.GRU(d_emb, d_hidden, batch_first=True)
        self.head = nn.Linear(d_hidden, vocab)

    def forward(self, x):
        out, _ = self.rnn(self.embedding(x))
        return self.head(out)

    def sample(self, bs, sl, bos=0, temperature=1.0):
        x = torch.full((bs, 1), bos, dtype=torch.long)
        hidden = None
        for _ in range(sl):
            out, hidden = self.rnn(self.embedding(x[:, -1:]), hidden)
            probs = F.softmax(self.head(out[:, -1]) / temperature, -1)
            x = torch.cat([x, torch.multinomial(probs, 1)], dim=1)
        return x


class Agent(Callback):
    """Holds the trainable model and a frozen base model for ratios / KL."""

    def __init__(self, model, lr=1e-3):
        super().__init__(name='agent', order=2)
        self.model = model
        self.base_model = copy.deepcopy(model)
        for p in self.base_model.parameters():
            p.requires_grad_(False)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)

    def get_model_outputs(self):
        batch_state = self.environment.batch_state
        x = torch.stack(batch_state.samples)
        inp, tgt = x[:, :-1], x[:, 1:]
        lps = F.log_softmax(self.model(inp), -1)
        with torch.no_grad():
            base_lps = F.log_softmax(self.base_model(inp), -1)
        batch_state.model_gathered_logprobs = lps.gather(2, tgt[..., None]).squeeze(-1)
        batch_state.base_gathered_logprobs = base_lps.gather(2, tgt[..., None]).squeeze(-1)
        batch_state.mask = torch.ones_like(tgt, dtype=torch.float)

    def zero_grad(self):
        self.opt.zero_grad()

    def step(self):
        self.opt.step()


class ModelSampler(Callback):
    def __init__(self, agent, bs, sl):
        super().__init__(name='model_sampler', order=10)
        self.agent, self.bs, self.sl = agent, bs, sl

    def sample_batch(self):
        batch_state = self.environment.batch_state
        with torch.no_grad():
            seqs = self.agent.model.sample(self.bs, self.sl)
        batch_state.samples += list(seqs)
        batch_state.sources += [self.name] * self.bs


class TokenCountReward(Callback):
    """Toy property score: fraction of positions holding the target token."""

    def __init__(self, target_token=3):
        super().__init__(name='token_reward', order=10)
        self.target_token = target_token

    def compute_reward(self):
        batch_state = self.environment.batch_state
        x = torch.stack(batch_state.samples)[:, 1:]
        rewards = (x == self.target_token).float().mean(-1)
        batch_state.rewards = batch_state.rewards + rewards
        self.environment.log.update_metric('rewards', rewards.numpy())


# ---------------------------------------------------------------- losses
class PolicyGradient():
    def __init__(self, gamma=0.97, ratio=False):
        self.gamma, self.ratio = gamma, ratio

    def from_batch_state(self, batch_state):
        lps = batch_state.model_gathered_logprobs
        base_lps = batch_state.base_gathered_logprobs
        mask = batch_state.mask
        if self.ratio:
            lps = (lps - base_lps.detach()).exp()
        traj = torch.zeros_like(mask)
        traj[:, -1] = batch_state.rewards
        rewards = whiten(discount_rewards(traj, self.gamma), mask=mask)
        return -(lps * rewards * mask).sum(-1) / mask.sum(-1)


class LossCallback(Callback):
    def __init__(self, loss_function, name, weight=1., track=True, order=20):
        super().__init__(name=name, order=order)
        self.loss_function = loss_function
        self.weight = weight
        self.track = track

    def compute_loss(self):
        loss = self.loss_function.from_batch_state(self.environment.batch_state)
        loss = loss * self.weight
        if self.track:
            self.environment.log.update_metric(self.name, loss.mean().detach().cpu().numpy())
        self.environment.batch_state.loss += loss.mean()
        self.environment.batch_state[self.name] = loss.detach().cpu().numpy()


# ---------------------------------------------------------------- environment
class Environment():
    def __init__(self, agent, samplers, rewards, losses, log=None):
        self.agent, self.samplers, self.rewards, self.losses = agent, samplers, rewards, losses
        self.log = log if log is not None else Log()
        self.batch_state = BatchState()
        self.cbs = []
        for cb in [agent] + samplers + rewards + losses + [self.log]:
            cb.environment = self
            setattr(self, cb.name, cb)
            self.cbs.append(cb)
        self.cbs = sorted(self.cbs, key=lambda x: x.order)

    def __call__(self, event):
        for cb in self.cbs:
            cb(event)

    def sample_batch(self):
        self.batch_state = BatchState()
        self('sample_batch')

    def compute_loss(self):
        self('compute_loss')
        loss = self.batch_state.loss
        self('zero_grad')
        loss.backward()
        self('step')

    def step(self):
        self.sample_batch()
        self('compute_reward')
        self('get_model_outputs')
        self.compute_loss()
        self('after_batch')

    def fit(self, iters, report):
        for i in range(iters):
            self.step()
            if i % report == 0:
                print(i, 'reward %.3f' % self.log.metrics['rewards'][-1])


if __name__ == '__main__':
    torch.manual_seed(0)
    agent = Agent(SequenceModel())
    env = Environment(agent,
                      samplers=[ModelSampler(agent, bs=16, sl=6)],
                      rewards=[TokenCountReward(target_token=3)],
                      losses=[LossCallback(PolicyGradient(), 'pg')])
    env.fit(iters=25, report=10)
