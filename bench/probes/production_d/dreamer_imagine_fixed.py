# expect: clean
# source: https://github.com/cross32768/Dreamer_PyTorch/issues/2
"""Dreamer-style agent: learn an RSSM world model from (synthetic) replay data,
then train the action and value models purely in latent imagination using
lambda-returns.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence
from torch.nn.utils import clip_grad_norm_

args = SimpleNamespace(
    obs_dim=12, action_dim=3, state_dim=8, rnn_hidden_dim=16, hidden_dim=32,
    batch_size=6, chunk_length=10, imagination_horizon=5,
    gamma=0.9, lambda_=0.95, free_nats=1.0,
    model_lr=6e-4, value_lr=8e-5, action_lr=8e-5, eps=1e-4,
    clip_grad_norm=100.0, update_steps=2, seed=0,
)


class RecurrentStateSpaceModel(nn.Module):
    def __init__(self, state_dim, action_dim, rnn_hidden_dim, obs_embed_dim, hidden_dim=32, min_stddev=0.1):
        super().__init__()
        self.fc_state_action = nn.Linear(state_dim + action_dim, hidden_dim)
        self.rnn = nn.GRUCell(hidden_dim, rnn_hidden_dim)
        self.fc_prior = nn.Linear(rnn_hidden_dim, 2 * state_dim)
        self.fc_posterior = nn.Linear(rnn_hidden_dim + obs_embed_dim, 2 * state_dim)
        self._min_stddev = min_stddev

    def _dist(self, h):
        mean, std = h.chunk(2, dim=-1)
        return Normal(mean, F.softplus(std) + self._min_stddev)

    def prior(self, state, action, rnn_hidden):
        h = F.elu(self.fc_state_action(torch.cat([state, action], dim=1)))
        rnn_hidden = self.rnn(h, rnn_hidden)
        return self._dist(self.fc_prior(rnn_hidden)), rnn_hidden

    def posterior(self, rnn_hidden, embedded_obs):
        return self._dist(self.fc_posterior(torch.cat([rnn_hidden, embedded_obs], dim=1)))


class Head(nn.Module):
    """Shared MLP used for the encoder, decoder, reward and value models."""

    def __init__(self, in_dim, out_dim, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ELU(),
                                 nn.Linear(hidden_dim, hidden_dim), nn.ELU(),
                                 nn.Linear(hidden_dim, out_dim))

    def forward(self, state, rnn_hidden=None):
        x = state if rnn_hidden is None else torch.cat([state, rnn_hidden], dim=1)
        return self.net(x)


class ActionModel(nn.Module):
    def __init__(self, state_dim, rnn_hidden_dim, action_dim, hidden_dim):
        super().__init__()
        self.net = Head(state_dim + rnn_hidden_dim, 2 * action_dim, hidden_dim)

    def forward(self, state, rnn_hidden):
        mean, std = self.net(state, rnn_hidden).chunk(2, dim=1)
        mean = 5.0 * torch.tanh(mean / 5.0)
        std = F.softplus(std + 5.0) + 1e-4
        return torch.tanh(mean + std * torch.randn_like(mean))


def lambda_target(rewards, values, gamma, lambda_):
    V_lambda = torch.zeros_like(rewards)
    H = rewards.shape[0] - 1
    V_n = torch.zeros_like(rewards)
    V_n[H] = values[H]
    for n in range(1, H + 1):
        V_n[:-n] = (gamma ** n) * values[n:]
        for k in range(1, n + 1):
            if k == n:
                V_n[:-n] += (gamma ** (n - 1)) * rewards[k:]
            else:
                V_n[:-n] += (gamma ** (k - 1)) * rewards[k:-n + k]
        if n == H:
            V_lambda += (lambda_ ** (H - 1)) * V_n
        else:
            V_lambda += (1 - lambda_) * (lambda_ ** (n - 1)) * V_n
    return V_lambda


def synthetic_replay(batch_size, chunk_length, obs_dim, action_dim):
    obs = torch.cumsum(torch.randn(chunk_length, batch_size, obs_dim) * 0.1, dim=0)
    actions = torch.rand(chunk_length, batch_size, action_dim) * 2 - 1
    rewards = -obs.pow(2).mean(-1, keepdim=True)
    return obs, actions, rewards


def main():
    torch.manual_seed(args.seed)
    encoder = Head(args.obs_dim, args.hidden_dim, args.hidden_dim)
    rssm = RecurrentStateSpaceModel(args.state_dim, args.action_dim, args.rnn_hidden_dim, args.hidden_dim)
    obs_model = Head(args.state_dim + args.rnn_hidden_dim, args.obs_dim, args.hidden_dim)
    reward_model = Head(args.state_dim + args.rnn_hidden_dim, 1, args.hidden_dim)
    value_model = Head(args.state_dim + args.rnn_hidden_dim, 1, args.hidden_dim)
    action_model = ActionModel(args.state_dim, args.rnn_hidden_dim, args.action_dim, args.hidden_dim)

    model_params = (list(encoder.parameters()) + list(rssm.parameters())
                    + list(obs_model.parameters()) + list(reward_model.parameters()))
    model_optimizer = torch.optim.Adam(model_params, lr=args.model_lr, eps=args.eps)
    value_optimizer = torch.optim.Adam(value_model.parameters(), lr=args.value_lr, eps=args.eps)
    action_optimizer = torch.optim.Adam(action_model.parameters(), lr=args.action_lr, eps=args.eps)

    for update_step in range(args.update_steps):
        observations, actions, rewards = synthetic_replay(args.batch_size, args.chunk_length,
                                                          args.obs_dim, args.action_dim)
        embedded = encoder(observations.reshape(-1, args.obs_dim)).view(args.chunk_length, args.batch_size, -1)

        # --- world model update (reconstruction + reward + KL) ---
        state = torch.zeros(args.batch_size, args.state_dim)
        rnn_hidden = torch.zeros(args.batch_size, args.rnn_hidden_dim)
        states = torch.zeros(args.chunk_length, args.batch_size, args.state_dim)
        rnn_hiddens = torch.zeros(args.chunk_length, args.batch_size, args.rnn_hidden_dim)
        kl_loss = 0
        for l in range(args.chunk_length - 1):
            prior, rnn_hidden = rssm.prior(state, actions[l], rnn_hidden)
            posterior = rssm.posterior(rnn_hidden, embedded[l + 1])
            state = posterior.rsample()
            states[l + 1] = state
            rnn_hiddens[l + 1] = rnn_hidden
            kl = kl_divergence(posterior, prior).sum(dim=1)
            kl_loss += kl.clamp(min=args.free_nats).mean()
        kl_loss /= (args.chunk_length - 1)
        states, rnn_hiddens = states[1:], rnn_hiddens[1:]
        flatten_states = states.view(-1, args.state_dim)
        flatten_rnn_hiddens = rnn_hiddens.view(-1, args.rnn_hidden_dim)
        recon = obs_model(flatten_states, flatten_rnn_hiddens).view(args.chunk_length - 1, args.batch_size, -1)
        pred_r = reward_model(flatten_states, flatten_rnn_hiddens).view(args.chunk_length - 1, args.batch_size, 1)
        obs_loss = 0.5 * F.mse_loss(recon, observations[1:], reduction="none").mean([0, 1]).sum()
        reward_loss = 0.5 * F.mse_loss(pred_r, rewards[:-1])
        model_loss = kl_loss + obs_loss + reward_loss
        model_optimizer.zero_grad()
        model_loss.backward()
        clip_grad_norm_(model_params, args.clip_grad_norm)
        model_optimizer.step()

        # --- imagination from posterior states (world model is held fixed) ---
        flatten_states = flatten_states.detach()
        flatten_rnn_hiddens = flatten_rnn_hiddens.detach()
        imaginated_states = torch.zeros(args.imagination_horizon + 1, *flatten_states.shape)
        imaginated_rnn_hiddens = torch.zeros(args.imagination_horizon + 1, *flatten_rnn_hiddens.shape)
        imaginated_states[0] = flatten_states
        imaginated_rnn_hiddens[0] = flatten_rnn_hiddens
        for h in range(1, args.imagination_horizon + 1):
            a = action_model(flatten_states, flatten_rnn_hiddens)
            prior, flatten_rnn_hiddens = rssm.prior(flatten_states, a, flatten_rnn_hiddens)
            flatten_states = prior.rsample()
            imaginated_states[h] = flatten_states
            imaginated_rnn_hiddens[h] = flatten_rnn_hiddens

        flatten_imaginated_states = imaginated_states.view(-1, args.state_dim)
        flatten_imaginated_rnn_hiddens = imaginated_rnn_hiddens.view(-1, args.rnn_hidden_dim)
        imaginated_rewards = reward_model(flatten_imaginated_states, flatten_imaginated_rnn_hiddens).view(args.imagination_horizon + 1, -1)
        imaginated_values = value_model(flatten_imaginated_states, flatten_imaginated_rnn_hiddens).view(args.imagination_horizon + 1, -1)
        lambda_target_values = lambda_target(imaginated_rewards, imaginated_values, args.gamma, args.lambda_)

        # update action model (multiply -1 for gradient ascent)
        action_loss = -1 * (lambda_target_values.mean())
        action_optimizer.zero_grad()
        action_loss.backward()
        clip_grad_norm_(action_model.parameters(), args.clip_grad_norm)
        action_optimizer.step()

        # update value model
        value_loss = 0.5 * F.mse_loss(value_model(flatten_imaginated_states.detach(), flatten_imaginated_rnn_hiddens.detach()).view(args.imagination_horizon + 1, -1), lambda_target_values.detach())
        value_optimizer.zero_grad()
        value_loss.backward()
        clip_grad_norm_(value_model.parameters(), args.clip_grad_norm)
        value_optimizer.step()

        print("update_step: %d model_loss: %.4f value_loss: %.4f action_loss: %.4f"
              % (update_step, model_loss.item(), value_loss.item(), action_loss.item()))


if __name__ == "__main__":
    main()
