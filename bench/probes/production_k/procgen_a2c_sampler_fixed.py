# expect: clean
# source: https://github.com/Kostis-S-Z/exploring_meta/issues/16
"""A2C baseline for the meta-RL experiments: a rollout Sampler collects
n_steps from a batch of parallel environments, advantages are computed with
GAE and the actor-critic is updated once per iteration.
"""
import random
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

params = {
    "lr": 0.005,
    "tau": 0.95,
    "gamma": 0.99,
    # Number of environments OF THE SAME LEVEL to run in parallel
    "n_envs": 8,
    # Rollout length of each of the above runs
    "n_steps_per_episode": 32,
    "n_iters": 15,
    "save_every": 5,
    "seed": 42,
}

network = [32, 32]


# ---------------------------------------------------------------- utils
class Experiment:
    """Minimal experiment bookkeeping (metrics and checkpoints kept in memory)."""

    def __init__(self, algo, env_name, params, use_wandb=False):
        self.algo, self.env_name, self.params = algo, env_name, dict(params)
        self.use_wandb = use_wandb
        self.logger = {'metrics': [], 'checkpoints': {}}

    def log_metrics(self, metrics, step):
        self.logger['metrics'].append((step, metrics))

    def save_model_checkpoint(self, model, name):
        self.logger['checkpoints'][name] = {k: v.clone() for k, v in model.state_dict().items()}


def to_np(t):
    return t.cpu().detach().numpy()


def normalize(tensor, epsilon=1e-8):
    return (tensor - tensor.mean()) / (tensor.std() + epsilon)


def discount(gamma, rewards, dones, bootstrap=0.0):
    R = torch.zeros_like(rewards[0]) + bootstrap
    discounted = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[0])):
        R = rewards[t] + gamma * R * (1.0 - dones[t])
        discounted[t] = R
    return discounted


def generalized_advantage(gamma, tau, rewards, dones, values, next_value):
    values = torch.cat([values, next_value.view(1, -1).expand(1, values.shape[1])], dim=0)
    advantages = torch.zeros_like(rewards)
    gae = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * values[t + 1] * (1.0 - dones[t]) - values[t]
        gae = delta + gamma * tau * (1.0 - dones[t]) * gae
        advantages[t] = gae
    return advantages


# ---------------------------------------------------------------- policies
class Actor(nn.Module):
    def __init__(self, input_size, output_size, network=(32, 32)):
        super().__init__()
        layers, size = [], input_size
        for h in network:
            layers += [nn.Linear(size, h), nn.ReLU()]
            size = h
        layers.append(nn.Linear(size, output_size))
        self.head = nn.Sequential(*layers)

    def forward(self, state):
        return self.head(state)


class Critic(Actor):
    pass


class ActorCritic(nn.Module):
    def __init__(self, input_size, output_size, network=(32, 32)):
        super().__init__()
        self.actor = Actor(input_size, output_size, network)
        self.critic = Critic(input_size, 1, network)
        # This is just a trivial assignment to follow the implementation of the sampler
        self.step = self.forward

    def forward(self, state):
        policy = Categorical(logits=self.actor(state))
        value = self.critic(state)
        action = policy.sample()
        log_prob = policy.log_prob(action)
        return action, {'mass': policy, 'log_prob': log_prob, 'value': value}


# ---------------------------------------------------------------- env + sampler
class GridSeekVecEnv:
    """num_envs copies of a 1-D seek task: reach position +5 from the origin."""

    def __init__(self, num_envs, seed=0, horizon=20):
        self.num_envs, self.horizon = num_envs, horizon
        self.rng = np.random.RandomState(seed)
        self.observation_space_shape = (4,)
        self.action_space_n = 3

    def _obs(self):
        return np.stack([self.pos / 5.0, np.sign(5 - self.pos), self.t / self.horizon,
                         np.ones(self.num_envs)], axis=1).astype(np.float32)

    def reset(self):
        self.pos = self.rng.randint(-2, 3, self.num_envs).astype(np.float32)
        self.t = np.zeros(self.num_envs, np.float32)
        return self._obs()

    def step(self, actions):
        self.pos += np.asarray(actions, np.float32) - 1.0
        self.t += 1
        rewards = np.where(self.pos >= 5, 1.0, -0.01).astype(np.float32)
        dones = (self.pos >= 5) | (self.t >= self.horizon)
        for i in np.where(dones)[0]:
            self.pos[i], self.t[i] = self.rng.randint(-2, 3), 0
        infos = [{'episode': {'r': float(r)}} if d else {} for r, d in zip(rewards, dones)]
        return self._obs(), rewards, dones, infos


class Sampler:
    def __init__(self, env, model, num_steps, gamma_coef, lambda_coef, device, num_envs):
        self.env, self.model, self.num_steps = env, model, num_steps
        self.lam, self.gamma, self.device = lambda_coef, gamma_coef, device
        self.obs = env.reset()
        self.dones = np.array([False for _ in range(num_envs)])

    def run(self):
        storage = defaultdict(list)  # should contain (state, action, reward, done, next state)
        epinfos = []
        self.model.eval()
        with torch.no_grad():
            for _ in range(self.num_steps):
                obs = torch.tensor(self.obs, device=self.device)
                storage["states"] += [to_np(obs.clone())]
                # Forward pass
                prediction, infos = self.model.step(obs)
                actions = to_np(prediction)
                storage["actions"] += [actions]
                storage["values"] += [to_np(infos["value"]).reshape(-1)]
                storage["log_prob"] += [to_np(infos["log_prob"])]

                self.obs, rewards, self.dones, env_infos = self.env.step(actions)
                storage["rewards"] += [rewards]
                storage["dones"] += [self.dones.astype(np.float32)]
                for info in env_infos:
                    if "episode" in info:
                        epinfos.append(info["episode"])
            # batch of steps to batch of rollouts
            for key in storage:
                storage[key] = np.asarray(storage[key])
        self.model.train()
        return storage, epinfos


def compute_adv_ret(train_episodes, gamma, tau, device='cpu'):
    values = torch.from_numpy(train_episodes["values"]).to(device)
    rewards = torch.from_numpy(train_episodes["rewards"]).to(device)
    dones = torch.from_numpy(train_episodes["dones"]).to(device).float()
    with torch.no_grad():
        advantages = generalized_advantage(gamma, tau, rewards, dones, values, torch.zeros(1))
        advantages = normalize(advantages, epsilon=1e-8)
        returns = discount(gamma, rewards, dones)
    return advantages, returns


def policy_loss(log_probs, advantages):
    return -torch.mean(log_probs * advantages)


def state_value_loss(values, rewards):
    return 0.5 * (rewards - values).pow(2).mean()


def compute_a2c_loss(episode_samples, policy, device='cpu'):
    states = torch.from_numpy(episode_samples["states"]).to(device)
    actions = torch.from_numpy(episode_samples["actions"]).to(device)
    advantages = episode_samples["advantages"].to(device)
    returns = episode_samples["returns"].to(device)
    # Re-evaluate the stored states with the current policy (with gradients)
    log_prob = Categorical(logits=policy.actor(states)).log_prob(actions)
    values = policy.critic(states).squeeze(-1)
    return policy_loss(log_prob, advantages), state_value_loss(values, returns)


# ---------------------------------------------------------------- experiment
class A2CProcgen(Experiment):

    def __init__(self):
        super(A2CProcgen, self).__init__("a2c", "gridseek", params, use_wandb=False)
        random.seed(self.params['seed'])
        np.random.seed(self.params['seed'])
        torch.manual_seed(self.params['seed'])
        self.run(torch.device('cpu'))

    def run(self, device):
        env = GridSeekVecEnv(self.params['n_envs'], seed=self.params['seed'])
        policy = ActorCritic(env.observation_space_shape[0], env.action_space_n, network).to(device)
        policy_optimiser = torch.optim.Adam(policy.parameters(), lr=self.params['lr'])
        # Sampler uses policy.eval() which turns off training to sample the actions
        sampler = Sampler(env=env, model=policy, num_steps=self.params['n_steps_per_episode'],
                          gamma_coef=params['gamma'], lambda_coef=params['tau'],
                          device=device, num_envs=self.params['n_envs'])
        value_l_weight = 0.5

        for iteration in range(self.params['n_iters']):
            tr_ep_samples, tr_ep_infos = sampler.run()
            tr_ep_samples["advantages"], tr_ep_samples["returns"] = compute_adv_ret(
                tr_ep_samples, params['gamma'], params['tau'], device)
            tr_rewards = tr_ep_samples['rewards'].sum().item() / self.params['n_envs']

            tr_policy_loss, tr_value_loss = compute_a2c_loss(tr_ep_samples, policy, device)
            loss = tr_policy_loss + (value_l_weight * tr_value_loss)

            # Optimize
            policy_optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            policy_optimiser.step()

            step = iteration * params['n_steps_per_episode'] * params['n_envs']
            self.log_metrics({'tr_iter_reward': tr_rewards,
                              'tr_actor_loss': tr_policy_loss.item(),
                              'tr_critic_loss': tr_value_loss.item(),
                              'tr_av_loss': loss.item()}, step)
            if iteration % self.params['save_every'] == 0:
                self.save_model_checkpoint(policy, str(iteration))
        print('last reward per env', self.logger['metrics'][-1][1]['tr_iter_reward'])


if __name__ == '__main__':
    A2CProcgen()
