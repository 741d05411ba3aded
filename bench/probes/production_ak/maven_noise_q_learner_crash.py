# expect: inplace_version
# source: https://github.com/AnujMahajanOxf/MAVEN/issues/3
"""MAVEN-style multi-agent value learning (noise-conditioned QMIX) on a synthetic matrix game:
pymarl layout (merged yaml-like configs, EpisodeBatch, noise-conditioned RNN agent with a hypernetwork
head, MAC, hypernetwork QMIX mixer, MI discriminator, episode runner, replay buffer, noise Q-learner
with a target network).  Random observations, states and action masks stand in for SMAC.
"""
import copy
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import RMSprop

DEFAULT_CONFIG = {"seed": 3, "t_max": 400, "batch_size": 8, "buffer_size": 64, "gamma": 0.99,
                  "lr": 0.0005, "optim_alpha": 0.99, "optim_eps": 1e-5, "grad_norm_clip": 10,
                  "rnn_hidden_dim": 32, "target_update_interval": 20}
ALG_CONFIG = {"action_selector": "epsilon_greedy", "epsilon_start": 1.0, "epsilon_finish": 0.05,
              "epsilon_anneal_time": 300, "double_q": True, "mixer": "qmix", "mixing_embed_dim": 16,
              "noise_dim": 2, "mi_loss": 1, "discrim_size": 32, "discrim_layers": 2}
ENV_CONFIG = {"n_agents": 3, "n_actions": 9, "obs_shape": 12, "state_shape": 20, "episode_limit": 10}


def make_args(*dicts):
    merged = {}
    for d in dicts:
        merged.update(copy.deepcopy(d))
    return SimpleNamespace(**merged)


class EpisodeBatch:
    def __init__(self, data, batch_size, max_seq_length):
        self.data = data
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length

    def __getitem__(self, key):
        return self.data[key]


class ReplayBuffer:
    def __init__(self, capacity):
        self.capacity = capacity
        self.episodes = []

    def insert_episode_batch(self, batch):
        self.episodes.append(batch)
        self.episodes = self.episodes[-self.capacity:]

    def can_sample(self, n):
        return len(self.episodes) >= n

    def sample(self, n, rng):
        picked = [self.episodes[i] for i in rng.choice(len(self.episodes), size=n, replace=False)]
        data = {k: th.cat([b.data[k] for b in picked], dim=0) for k in picked[0].data}
        return EpisodeBatch(data, n, picked[0].max_seq_length)


class NoiseRNNAgent(nn.Module):
    def __init__(self, input_shape, args):
        super().__init__()
        self.args = args
        self.fc1 = nn.Linear(input_shape, args.rnn_hidden_dim)
        self.rnn = nn.GRUCell(args.rnn_hidden_dim, args.rnn_hidden_dim)
        self.fc2 = nn.Linear(args.rnn_hidden_dim, args.n_actions)
        self.hyper_noise_fc1 = nn.Linear(args.noise_dim + args.n_agents, args.rnn_hidden_dim * args.n_actions)

    def init_hidden(self):
        return self.fc1.weight.new(1, self.args.rnn_hidden_dim).zero_()

    def forward(self, inputs, hidden_state, noise):
        agent_ids = th.eye(self.args.n_agents).repeat(noise.shape[0], 1)
        noise_repeated = noise.repeat(1, self.args.n_agents).reshape(agent_ids.shape[0], -1)
        x = F.relu(self.fc1(inputs))
        h = self.rnn(x, hidden_state.reshape(-1, self.args.rnn_hidden_dim))
        noise_input = th.cat([noise_repeated, agent_ids], dim=-1)
        W = self.hyper_noise_fc1(noise_input).reshape(-1, self.args.n_actions, self.args.rnn_hidden_dim)
        wq = th.bmm(W, h.unsqueeze(2))
        return wq, h


class NoiseMAC:
    def __init__(self, args):
        self.args = args
        self.n_agents = args.n_agents
        input_shape = args.obs_shape + args.n_actions + args.n_agents
        self.agent = NoiseRNNAgent(input_shape, args)
        self.hidden_states = None

    def _build_inputs(self, batch, t):
        bs = batch.batch_size
        last = th.zeros_like(batch["actions_onehot"][:, t]) if t == 0 else batch["actions_onehot"][:, t - 1]
        ids = th.eye(self.n_agents).unsqueeze(0).expand(bs, -1, -1)
        inputs = th.cat([batch["obs"][:, t], last, ids], dim=-1)
        return inputs.reshape(bs * self.n_agents, -1)

    def init_hidden(self, batch_size):
        self.hidden_states = self.agent.init_hidden().unsqueeze(0).expand(batch_size, self.n_agents, -1)

    def forward(self, batch, t):
        agent_inputs = self._build_inputs(batch, t)
        noise = batch["noise"][:, 0]
        agent_outs, self.hidden_states = self.agent(agent_inputs, self.hidden_states, noise)
        return agent_outs.view(batch.batch_size, self.n_agents, -1)

    def select_actions(self, batch, t, epsilon, rng):
        qs = self.forward(batch, t).clone()
        avail = batch["avail_actions"][:, t]
        qs[avail == 0] = -float("inf")
        greedy = qs.max(dim=2)[1]
        random_actions = th.multinomial(avail.reshape(-1, self.args.n_actions).float(), 1).view_as(greedy)
        return th.where(th.from_numpy(rng.random(greedy.shape) < epsilon), random_actions, greedy)

    def parameters(self):
        return self.agent.parameters()

    def load_state(self, other_mac):
        self.agent.load_state_dict(other_mac.agent.state_dict())


class NoiseQMixer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args, self.n_agents, self.embed_dim = args, args.n_agents, args.mixing_embed_dim
        state_dim = int(np.prod(args.state_shape)) + args.noise_dim
        self.hyper_w_1 = nn.Linear(state_dim, self.embed_dim * self.n_agents)
        self.hyper_w_final = nn.Linear(state_dim, self.embed_dim)
        self.hyper_b_1 = nn.Linear(state_dim, self.embed_dim)
        self.V = nn.Sequential(nn.Linear(state_dim, self.embed_dim), nn.ReLU(), nn.Linear(self.embed_dim, 1))

    def forward(self, agent_qs, states, noise):
        bs = agent_qs.size(0)
        states = th.cat([states, noise], dim=-1).reshape(-1, self.args.state_shape + self.args.noise_dim)
        agent_qs = agent_qs.view(-1, 1, self.n_agents)
        w1 = th.abs(self.hyper_w_1(states)).view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b_1(states).view(-1, 1, self.embed_dim)
        hidden = F.elu(th.bmm(agent_qs, w1) + b1)
        w_final = th.abs(self.hyper_w_final(states)).view(-1, self.embed_dim, 1)
        v = self.V(states).view(-1, 1, 1)
        y = th.bmm(hidden, w_final) + v
        return y.view(bs, -1, 1)


def build_discrim(input_size, output_size, args):
    layers = [nn.Linear(input_size, args.discrim_size), nn.ReLU()]
    for _ in range(args.discrim_layers - 1):
        layers += [nn.Linear(args.discrim_size, args.discrim_size), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(args.discrim_size, output_size))


class NoiseQLearner:
    def __init__(self, mac, logger, args):
        self.args = args
        self.mac = mac
        self.logger = logger
        self.params = list(mac.parameters())
        self.last_target_update_episode = 0
        self.mixer = NoiseQMixer(args)
        self.params += list(self.mixer.parameters())
        self.target_mixer = copy.deepcopy(self.mixer)
        discrim_input = int(np.prod(args.state_shape)) + args.n_agents * args.n_actions
        self.discrim = build_discrim(discrim_input, args.noise_dim, args)
        self.params += list(self.discrim.parameters())
        self.discrim_loss = nn.CrossEntropyLoss(reduction="none")
        self.optimiser = RMSprop(params=self.params, lr=args.lr, alpha=args.optim_alpha, eps=args.optim_eps)
        self.target_mac = copy.deepcopy(mac)

    def train(self, batch, t_env, episode_num):
        rewards = batch["reward"][:, :-1]
        actions = batch["actions"][:, :-1]
        terminated = batch["terminated"][:, :-1].float()
        mask = batch["filled"][:, :-1].float()
        mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])
        avail_actions = batch["avail_actions"]
        noise = batch["noise"][:, 0].unsqueeze(1).repeat(1, rewards.shape[1], 1)

        mac_out = []
        self.mac.init_hidden(batch.batch_size)
        for t in range(batch.max_seq_length):
            mac_out.append(self.mac.forward(batch, t=t))
        mac_out = th.stack(mac_out, dim=1)
        chosen_action_qvals = th.gather(mac_out[:, :-1], dim=3, index=actions).squeeze(3)

        target_mac_out = []
        self.target_mac.init_hidden(batch.batch_size)
        for t in range(batch.max_seq_length):
            target_mac_out.append(self.target_mac.forward(batch, t=t))
        target_mac_out = th.stack(target_mac_out[1:], dim=1)
        target_mac_out[avail_actions[:, 1:] == 0] = -9999999

        if self.args.double_q:
            mac_out[avail_actions == 0] = -9999999
            cur_max_actions = mac_out[:, 1:].max(dim=3, keepdim=True)[1]
            target_max_qvals = th.gather(target_mac_out, 3, cur_max_actions).squeeze(3)
        else:
            target_max_qvals = target_mac_out.max(dim=3)[0]

        chosen_action_qvals = self.mixer(chosen_action_qvals, batch["state"][:, :-1], noise)
        target_max_qvals = self.target_mixer(target_max_qvals, batch["state"][:, 1:], noise)

        # Discriminator
        mac_out[avail_actions == 0] = -9999999
        q_softmax_actions = F.softmax(mac_out[:, :-1], dim=3)
        q_softmax_agents = q_softmax_actions.reshape(q_softmax_actions.shape[0], q_softmax_actions.shape[1], -1)
        states = batch["state"][:, :-1]
        state_and_softactions = th.cat([q_softmax_agents, states], dim=2)
        s_and_softa_reshaped = state_and_softactions.reshape(-1, state_and_softactions.shape[-1])
        discrim_prediction = self.discrim(s_and_softa_reshaped)
        target_repeats = q_softmax_actions.shape[1]
        discrim_target = batch["noise"][:, 0].long().max(dim=1)[1].unsqueeze(1).repeat(1, target_repeats).reshape(-1)
        discrim_loss = self.discrim_loss(discrim_prediction, discrim_target)
        averaged_discrim_loss = (discrim_loss * mask.reshape(-1)).sum() / mask.sum()
        self.logger["discrim_loss"].append((t_env, averaged_discrim_loss.item()))

        targets = rewards + self.args.gamma * (1 - terminated) * target_max_qvals
        td_error = chosen_action_qvals - targets.detach()
        mask = mask.expand_as(td_error)
        masked_td_error = td_error * mask
        loss = (masked_td_error ** 2).sum() / mask.sum()
        loss = loss + self.args.mi_loss * averaged_discrim_loss

        self.optimiser.zero_grad()
        loss.backward()  # raises
        grad_norm = th.nn.utils.clip_grad_norm_(self.params, self.args.grad_norm_clip)
        self.optimiser.step()

        if (episode_num - self.last_target_update_episode) / self.args.target_update_interval >= 1.0:
            self.target_mac.load_state(self.mac)
            self.target_mixer.load_state_dict(self.mixer.state_dict())
            self.last_target_update_episode = episode_num
        self.logger["loss"].append((t_env, loss.item()))
        self.logger["grad_norm"].append((t_env, float(grad_norm)))


class EpisodeRunner:
    """Rolls out one episode of a random matrix game with the current MAC."""

    def __init__(self, args, mac, rng):
        self.args = args
        self.mac = mac
        self.rng = rng
        self.t_env = 0

    def epsilon(self):
        frac = min(1.0, self.t_env / self.args.epsilon_anneal_time)
        return self.args.epsilon_start + frac * (self.args.epsilon_finish - self.args.epsilon_start)

    def run(self):
        a, T = self.args, self.args.episode_limit + 1
        avail = (th.rand(1, T, a.n_agents, a.n_actions) > 0.3).long()
        avail[..., 0] = 1
        noise = th.zeros(1, T, a.noise_dim)
        noise[:, :, self.rng.integers(a.noise_dim)] = 1.0
        data = {"obs": th.randn(1, T, a.n_agents, a.obs_shape), "state": th.randn(1, T, a.state_shape),
                "avail_actions": avail, "noise": noise,
                "actions": th.zeros(1, T, a.n_agents, 1, dtype=th.long),
                "actions_onehot": th.zeros(1, T, a.n_agents, a.n_actions),
                "reward": th.zeros(1, T, 1), "terminated": th.zeros(1, T, 1), "filled": th.ones(1, T, 1)}
        batch = EpisodeBatch(data, 1, T)
        self.mac.init_hidden(1)
        with th.no_grad():
            for t in range(T):
                acts = self.mac.select_actions(batch, t, self.epsilon(), self.rng)
                data["actions"][:, t, :, 0] = acts
                data["actions_onehot"][:, t] = F.one_hot(acts, a.n_actions).float()
                data["reward"][:, t, 0] = float((acts == acts[:, :1]).all())
        data["terminated"][:, T - 2] = 1.0
        self.t_env += T - 1
        return batch


def run_sequential(args):
    rng = np.random.default_rng(args.seed)
    logger = defaultdict(list)
    mac = NoiseMAC(args)
    learner = NoiseQLearner(mac, logger, args)
    runner = EpisodeRunner(args, mac, rng)
    buffer = ReplayBuffer(args.buffer_size)
    episode = 0
    while runner.t_env <= args.t_max:
        buffer.insert_episode_batch(runner.run())
        episode += 1
        if buffer.can_sample(args.batch_size):
            learner.train(buffer.sample(args.batch_size, rng), runner.t_env, episode)
    print({k: round(v[-1][1], 4) for k, v in logger.items()})


def main():
    args = make_args(DEFAULT_CONFIG, ALG_CONFIG, ENV_CONFIG)
    th.manual_seed(args.seed)
    run_sequential(args)


if __name__ == "__main__":
    main()
