# expect: clean
# source: https://github.com/toshikwa/fqf-iqn-qrdqn.pytorch/issues/3
"""Fully parameterized Quantile Function (FQF) agent on a small vector task."""
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
from torch.optim import Adam, RMSprop


def initialize_weights_xavier(m, gain=1.0):
    if isinstance(m, nn.Linear):
        torch.nn.init.xavier_uniform_(m.weight, gain=gain)
        if m.bias is not None:
            torch.nn.init.constant_(m.bias, 0)


# ---------------------------------------------------------------- utils
def update_params(optim, loss, networks, retain_graph=False, grad_cliping=None):
    optim.zero_grad()
    loss.backward(retain_graph=retain_graph)
    # Clip norms of gradients to stebilize training.
    if grad_cliping:
        for net in networks:
            torch.nn.utils.clip_grad_norm_(net.parameters(), grad_cliping)
    optim.step()


def disable_gradients(network):
    for param in network.parameters():
        param.requires_grad = False


def calculate_huber_loss(td_errors, kappa=1.0):
    return torch.where(td_errors.abs() <= kappa, 0.5 * td_errors.pow(2),
                       kappa * (td_errors.abs() - 0.5 * kappa))


def calculate_quantile_huber_loss(td_errors, taus, weights=None, kappa=1.0):
    assert not taus.requires_grad
    element_wise_huber_loss = calculate_huber_loss(td_errors, kappa)
    element_wise_quantile_huber_loss = torch.abs(
        taus[..., None] - (td_errors.detach() < 0).float()
    ) * element_wise_huber_loss / kappa
    batch_quantile_huber_loss = element_wise_quantile_huber_loss.sum(dim=1).mean(dim=1, keepdim=True)
    if weights is not None:
        return (batch_quantile_huber_loss * weights).mean()
    return batch_quantile_huber_loss.mean()


def evaluate_quantile_at_action(s_quantiles, actions):
    batch_size, N = s_quantiles.shape[:2]
    action_index = actions[..., None].expand(batch_size, N, 1)
    return s_quantiles.gather(dim=2, index=action_index)


# ---------------------------------------------------------------- network
class DQNBase(nn.Module):
    """Feature extractor; an MLP here because observations are vectors."""

    def __init__(self, obs_dim, embedding_dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, 64), nn.ReLU(),
                                 nn.Linear(64, embedding_dim), nn.ReLU())
        self.embedding_dim = embedding_dim

    def forward(self, states):
        return self.net(states)


class FractionProposalNetwork(nn.Module):
    def __init__(self, N=8, embedding_dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(embedding_dim, N)).apply(
            lambda x: initialize_weights_xavier(x, gain=0.01))
        self.N = N

    def forward(self, state_embeddings):
        batch_size = state_embeddings.shape[0]
        # Calculate (log of) probabilities q_i in the paper.
        log_probs = F.log_softmax(self.net(state_embeddings), dim=1)
        probs = log_probs.exp()
        tau_0 = torch.zeros((batch_size, 1), dtype=state_embeddings.dtype)
        taus_1_N = torch.cumsum(probs, dim=1)
        # Calculate \tau_i (i=0,...,N).
        taus = torch.cat((tau_0, taus_1_N), dim=1)
        # Calculate \hat \tau_i (i=0,...,N-1).
        tau_hats = (taus[:, :-1] + taus[:, 1:]).detach() / 2.
        # Calculate entropies of value distributions.
        entropies = -(log_probs * probs).sum(dim=-1, keepdim=True)
        return taus, tau_hats, entropies


class CosineEmbeddingNetwork(nn.Module):
    def __init__(self, num_cosines=16, embedding_dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(num_cosines, embedding_dim), nn.ReLU())
        self.num_cosines = num_cosines
        self.embedding_dim = embedding_dim

    def forward(self, taus):
        batch_size, N = taus.shape
        i_pi = np.pi * torch.arange(1, self.num_cosines + 1, dtype=taus.dtype).view(1, 1, -1)
        cosines = torch.cos(taus.view(batch_size, N, 1) * i_pi).view(batch_size * N, self.num_cosines)
        return self.net(cosines).view(batch_size, N, self.embedding_dim)


class QuantileNetwork(nn.Module):
    def __init__(self, num_actions, embedding_dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(embedding_dim, 64), nn.ReLU(), nn.Linear(64, num_actions))
        self.num_actions = num_actions
        self.embedding_dim = embedding_dim

    def forward(self, state_embeddings, tau_embeddings):
        batch_size, N = tau_embeddings.shape[:2]
        state_embeddings = state_embeddings.view(batch_size, 1, self.embedding_dim)
        embeddings = (state_embeddings * tau_embeddings).view(batch_size * N, self.embedding_dim)
        return self.net(embeddings).view(batch_size, N, self.num_actions)


class FQF(nn.Module):
    def __init__(self, obs_dim, num_actions, N=8, num_cosines=16, embedding_dim=32, target=False):
        super().__init__()
        self.dqn_net = DQNBase(obs_dim, embedding_dim)
        self.cosine_net = CosineEmbeddingNetwork(num_cosines, embedding_dim)
        self.quantile_net = QuantileNetwork(num_actions, embedding_dim)
        if not target:
            self.fraction_net = FractionProposalNetwork(N, embedding_dim)
        self.N, self.num_actions, self.target = N, num_actions, target

    def calculate_state_embeddings(self, states):
        return self.dqn_net(states)

    def calculate_fractions(self, states=None, state_embeddings=None, fraction_net=None):
        if state_embeddings is None:
            state_embeddings = self.dqn_net(states)
        fraction_net = fraction_net if self.target else self.fraction_net
        return fraction_net(state_embeddings)

    def calculate_quantiles(self, taus, states=None, state_embeddings=None):
        if state_embeddings is None:
            state_embeddings = self.dqn_net(states)
        return self.quantile_net(state_embeddings, self.cosine_net(taus))

    def calculate_q(self, states=None, state_embeddings=None, fraction_net=None):
        if state_embeddings is None:
            state_embeddings = self.dqn_net(states)
        taus, tau_hats, _ = self.calculate_fractions(
            state_embeddings=state_embeddings, fraction_net=fraction_net)
        quantile_hats = self.calculate_quantiles(tau_hats, state_embeddings=state_embeddings)
        return ((taus[:, 1:, None] - taus[:, :-1, None]) * quantile_hats).sum(dim=1)


# ---------------------------------------------------------------- agent
class FQFAgent:

    def __init__(self, obs_dim, num_actions, batch_size=16, N=8, num_cosines=16,
                 ent_coef=0.0, kappa=1.0, quantile_lr=5e-4, fraction_lr=2.5e-5,
                 gamma=0.99, grad_cliping=None, seed=0):
        torch.manual_seed(seed)
        self.rng = np.random.RandomState(seed)
        self.online_net = FQF(obs_dim, num_actions, N, num_cosines)
        self.target_net = FQF(obs_dim, num_actions, N, num_cosines, target=True)
        self.update_target()
        disable_gradients(self.target_net)

        self.fraction_optim = RMSprop(self.online_net.fraction_net.parameters(),
                                      lr=fraction_lr, alpha=0.95, eps=0.00001)
        self.quantile_optim = Adam(
            list(self.online_net.dqn_net.parameters())
            + list(self.online_net.cosine_net.parameters())
            + list(self.online_net.quantile_net.parameters()),
            lr=quantile_lr, eps=1e-2 / batch_size)

        # NOTE: entropy of value distribution can be used as a regularizer
        # to stabilize (but possibly slow down) training.
        self.ent_coef, self.N, self.kappa = ent_coef, N, kappa
        self.batch_size, self.gamma_n, self.grad_cliping = batch_size, gamma, grad_cliping
        self.learning_steps = 0
        self.log = {'fraction_loss': [], 'quantile_loss': [], 'mean_q': []}

    def update_target(self):
        self.target_net.dqn_net.load_state_dict(self.online_net.dqn_net.state_dict())
        self.target_net.quantile_net.load_state_dict(self.online_net.quantile_net.state_dict())
        self.target_net.cosine_net.load_state_dict(self.online_net.cosine_net.state_dict())

    def learn(self, batch):
        self.learning_steps += 1
        states, actions, rewards, next_states, dones = batch
        weights = None

        # Calculate embeddings of current states.
        state_embeddings = self.online_net.calculate_state_embeddings(states)
        # Calculate fractions of current states and entropies.
        taus, tau_hats, entropies = self.online_net.calculate_fractions(
            state_embeddings=state_embeddings.detach())
        # Calculate quantile values of current states and actions at tau_hats.
        current_sa_quantile_hats = evaluate_quantile_at_action(
            self.online_net.calculate_quantiles(tau_hats, state_embeddings=state_embeddings),
            actions)

        # NOTE: Detach state_embeddings not to update convolution layers. Also,
        # detach current_sa_quantile_hats because I calculate gradients of taus
        # explicitly, not by backpropagation.
        fraction_loss = self.calculate_fraction_loss(
            state_embeddings.detach(), current_sa_quantile_hats.detach(), taus, actions, weights)
        quantile_loss, mean_q = self.calculate_quantile_loss(
            tau_hats, current_sa_quantile_hats, rewards, next_states, dones, weights)
        entropy_loss = -self.ent_coef * entropies.mean()

        update_params(self.fraction_optim, fraction_loss + entropy_loss,
                      networks=[self.online_net.fraction_net], retain_graph=True,
                      grad_cliping=self.grad_cliping)
        update_params(self.quantile_optim, quantile_loss,
                      networks=[self.online_net.dqn_net, self.online_net.cosine_net,
                                self.online_net.quantile_net],
                      retain_graph=False, grad_cliping=self.grad_cliping)

        self.log['fraction_loss'].append(fraction_loss.item())
        self.log['quantile_loss'].append(quantile_loss.item())
        self.log['mean_q'].append(mean_q)

    def calculate_fraction_loss(self, state_embeddings, sa_quantile_hats, taus, actions, weights):
        batch_size = state_embeddings.shape[0]
        with torch.no_grad():
            sa_quantiles = evaluate_quantile_at_action(
                self.online_net.calculate_quantiles(taus=taus[:, 1:-1], state_embeddings=state_embeddings),
                actions)
        values_1 = sa_quantiles - sa_quantile_hats[:, :-1]
        signs_1 = sa_quantiles > torch.cat([sa_quantile_hats[:, :1], sa_quantiles[:, :-1]], dim=1)
        values_2 = sa_quantiles - sa_quantile_hats[:, 1:]
        signs_2 = sa_quantiles < torch.cat([sa_quantiles[:, 1:], sa_quantile_hats[:, -1:]], dim=1)
        gradient_of_taus = (torch.where(signs_1, values_1, -values_1)
                            + torch.where(signs_2, values_2, -values_2)).view(batch_size, self.N - 1)
        # Gradients of the network parameters and corresponding loss
        # are calculated using chain rule.
        return (gradient_of_taus * taus[:, 1:-1]).sum(dim=1).mean()

    def calculate_quantile_loss(self, tau_hats, current_sa_quantile_hats, rewards, next_states,
                                dones, weights):
        with torch.no_grad():
            next_state_embeddings = self.target_net.calculate_state_embeddings(next_states)
            next_q = self.target_net.calculate_q(state_embeddings=next_state_embeddings,
                                                 fraction_net=self.online_net.fraction_net)
            next_actions = torch.argmax(next_q, dim=1, keepdim=True)
            next_sa_quantile_hats = evaluate_quantile_at_action(
                self.target_net.calculate_quantiles(taus=tau_hats, state_embeddings=next_state_embeddings),
                next_actions).transpose(1, 2)
            target_sa_quantile_hats = rewards[..., None] + (
                1.0 - dones[..., None]) * self.gamma_n * next_sa_quantile_hats
        td_errors = target_sa_quantile_hats - current_sa_quantile_hats
        loss = calculate_quantile_huber_loss(td_errors, tau_hats, weights, self.kappa)
        return loss, next_q.mean().item()


def make_batches(num_batches, batch_size, obs_dim, num_actions, seed=0):
    """Synthetic transitions from a noisy linear-reward task."""
    rng = np.random.RandomState(seed)
    w = rng.randn(obs_dim, num_actions).astype(np.float32)
    for _ in range(num_batches):
        s = rng.randn(batch_size, obs_dim).astype(np.float32)
        a = rng.randint(num_actions, size=(batch_size, 1))
        r = (s @ w)[np.arange(batch_size), a[:, 0]][:, None] + 0.1 * rng.randn(batch_size, 1)
        s2 = (0.9 * s + 0.1 * rng.randn(batch_size, obs_dim)).astype(np.float32)
        d = (rng.rand(batch_size, 1) < 0.05).astype(np.float32)
        yield (torch.from_numpy(s), torch.from_numpy(a).long(),
               torch.from_numpy(r.astype(np.float32)), torch.from_numpy(s2), torch.from_numpy(d))


if __name__ == '__main__':
    agent = FQFAgent(obs_dim=8, num_actions=4, seed=0)
    for i, batch in enumerate(make_batches(60, agent.batch_size, 8, 4)):
        agent.learn(batch)
        if i % 20 == 19:
            agent.update_target()
    print('quantile loss', np.mean(agent.log['quantile_loss'][-10:]))
