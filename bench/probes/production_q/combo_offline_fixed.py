# expect: clean
# source: https://github.com/yihaosun1124/OfflineRL-Kit/issues/15
"""COMBO (conservative offline model-based policy optimisation) on a synthetic
offline dataset.

A probabilistic dynamics ensemble is fitted to the offline transitions, short
model rollouts fill a fake replay buffer, and a SAC-style agent with twin
critics is trained on mixed real/fake batches with a CQL regulariser.
"""
import argparse
import numpy as np
import torch
import torch.nn as nn


DEFAULTS = dict(seed=0, obs_dim=6, action_dim=2, actor_lr=1e-4, critic_lr=3e-4, gamma=0.99, tau=0.005,
                cql_weight=1.0, temperature=1.0, num_repeat_actions=4, rollout_length=2, real_ratio=0.5,
                batch_size=64, epoch=2, step_per_epoch=5, dynamics_epochs=20)


def get_args(argv=None):
    p = argparse.ArgumentParser()
    for k, v in DEFAULTS.items():
        p.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    p.add_argument("--hidden-dims", type=int, nargs="*", default=[64, 64])
    p.add_argument("--auto-alpha", default=True)
    return p.parse_args(argv)


class MLP(nn.Module):
    def __init__(self, input_dim, hidden_dims, output_dim=None):
        super().__init__()
        layers, d = [], input_dim
        for h in hidden_dims:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        if output_dim is not None:
            layers.append(nn.Linear(d, output_dim))
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class TanhDiagGaussianActor(nn.Module):
    def __init__(self, obs_dim, action_dim, hidden_dims):
        super().__init__()
        self.backbone = MLP(obs_dim, hidden_dims)
        self.mu = nn.Linear(hidden_dims[-1], action_dim)
        self.log_std = nn.Linear(hidden_dims[-1], action_dim)

    @property
    def device(self):
        return next(self.parameters()).device

    def forward(self, obs):
        logits = self.backbone(obs)
        mu = self.mu(logits)
        std = self.log_std(logits).clamp(-5, 2).exp()
        return torch.distributions.Normal(mu, std)


class Critic(nn.Module):
    def __init__(self, obs_dim, action_dim, hidden_dims):
        super().__init__()
        self.net = MLP(obs_dim + action_dim, hidden_dims, 1)

    def forward(self, obs, actions):
        return self.net(torch.cat([obs, actions], dim=1))


class EnsembleDynamics:
    """Ensemble of probabilistic MLPs predicting (delta obs, reward)."""

    def __init__(self, obs_dim, action_dim, num_ensemble=3, lr=1e-3):
        self.models = nn.ModuleList([MLP(obs_dim + action_dim, [64, 64], 2 * (obs_dim + 1))
                                     for _ in range(num_ensemble)])
        self.optim = torch.optim.Adam(self.models.parameters(), lr=lr)
        self.obs_dim = obs_dim

    def _forward(self, obs, act):
        out = torch.stack([m(torch.cat([obs, act], -1)) for m in self.models])
        mean, logvar = out.chunk(2, dim=-1)
        return mean, logvar.clamp(-10, 0.5)

    def train(self, data, epochs):
        inputs_o, inputs_a = data["observations"], data["actions"]
        targets = torch.cat([data["next_observations"] - inputs_o, data["rewards"]], -1)
        for _ in range(epochs):
            mean, logvar = self._forward(inputs_o, inputs_a)
            loss = (((mean - targets) ** 2) * torch.exp(-logvar) + logvar).mean()
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
        return loss.item()

    @torch.no_grad()
    def step(self, obs, act):
        mean, logvar = self._forward(obs, act)
        samples = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
        idx = torch.randint(len(self.models), (obs.shape[0],))
        sample = samples[idx, torch.arange(obs.shape[0])]
        next_obs = obs + sample[:, :self.obs_dim]
        reward = sample[:, self.obs_dim:]
        terminal = torch.zeros_like(reward)
        return next_obs, reward, terminal


class ReplayBuffer:
    def __init__(self, data=None):
        self.data = {} if data is None else dict(data)

    def add_batch(self, **kw):
        for k, v in kw.items():
            self.data[k] = v if k not in self.data else torch.cat([self.data[k], v])[-2000:]

    def sample(self, n):
        idx = torch.randint(len(self.data["observations"]), (n,))
        return {k: v[idx] for k, v in self.data.items()}


class COMBOPolicy(nn.Module):
    def __init__(self, args, dynamics):
        super().__init__()
        self.dynamics = dynamics
        self.actor = TanhDiagGaussianActor(args.obs_dim, args.action_dim, args.hidden_dims)
        self.critic1 = Critic(args.obs_dim, args.action_dim, args.hidden_dims)
        self.critic2 = Critic(args.obs_dim, args.action_dim, args.hidden_dims)
        self.critic1_old = Critic(args.obs_dim, args.action_dim, args.hidden_dims)
        self.critic2_old = Critic(args.obs_dim, args.action_dim, args.hidden_dims)
        self.critic1_old.load_state_dict(self.critic1.state_dict())
        self.critic2_old.load_state_dict(self.critic2.state_dict())
        self.actor_optim = torch.optim.Adam(self.actor.parameters(), lr=args.actor_lr)
        self.critic1_optim = torch.optim.Adam(self.critic1.parameters(), lr=args.critic_lr)
        self.critic2_optim = torch.optim.Adam(self.critic2.parameters(), lr=args.critic_lr)
        self._is_auto_alpha = args.auto_alpha
        if self._is_auto_alpha:
            self._target_entropy = -args.action_dim
            self._log_alpha = torch.zeros(1, requires_grad=True)
            self.alpha_optim = torch.optim.Adam([self._log_alpha], lr=1e-4)
            self._alpha = self._log_alpha.detach().exp()
        else:
            self._alpha = 0.2
        self._gamma, self._tau = args.gamma, args.tau
        self._cql_weight, self._temperature = args.cql_weight, args.temperature
        self._num_repeat_actions = args.num_repeat_actions
        self._action_dim = args.action_dim

    def _sync_weight(self):
        for old, new in ((self.critic1_old, self.critic1), (self.critic2_old, self.critic2)):
            for o, n in zip(old.parameters(), new.parameters()):
                o.data.copy_(o.data * (1.0 - self._tau) + n.data * self._tau)

    def actforward(self, obs, deterministic=False):
        dist = self.actor(obs)
        raw = dist.mean if deterministic else dist.rsample()
        squashed = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(1 - squashed.pow(2) + 1e-6)
        return squashed, log_prob.sum(-1, keepdim=True)

    def calc_pi_values(self, obs_pi, obs_to_pred):
        act, log_prob = self.actforward(obs_pi)
        q1 = self.critic1(obs_to_pred, act)
        q2 = self.critic2(obs_to_pred, act)
        return q1 - log_prob.detach(), q2 - log_prob.detach()

    def calc_random_values(self, obs, random_act):
        q1 = self.critic1(obs, random_act)
        q2 = self.critic2(obs, random_act)
        log_prob = np.log(0.5 ** random_act.shape[-1])
        return q1 - log_prob, q2 - log_prob

    def learn(self, batch):
        real_batch, fake_batch = batch["real"], batch["fake"]
        mix_batch = {k: torch.cat([real_batch[k], fake_batch[k]], 0) for k in real_batch.keys()}
        obss, actions = mix_batch["observations"], mix_batch["actions"]
        next_obss, rewards, terminals = mix_batch["next_observations"], mix_batch["rewards"], mix_batch["terminals"]
        batch_size = obss.shape[0]

        # update actor
        a, log_probs = self.actforward(obss)
        actor_loss = (self._alpha * log_probs - torch.min(self.critic1(obss, a), self.critic2(obss, a))).mean()
        self.actor_optim.zero_grad()
        actor_loss.backward()
        self.actor_optim.step()
        if self._is_auto_alpha:
            alpha_loss = -(self._log_alpha * (log_probs.detach() + self._target_entropy)).mean()
            self.alpha_optim.zero_grad()
            alpha_loss.backward()
            self.alpha_optim.step()
            self._alpha = self._log_alpha.detach().exp()

        # compute td error
        with torch.no_grad():
            next_actions, next_log_probs = self.actforward(next_obss)
            next_q = torch.min(self.critic1_old(next_obss, next_actions),
                               self.critic2_old(next_obss, next_actions)) - self._alpha * next_log_probs
            target_q = rewards + self._gamma * (1 - terminals) * next_q
        critic1_loss = ((self.critic1(obss, actions) - target_q).pow(2)).mean()
        critic2_loss = ((self.critic2(obss, actions) - target_q).pow(2)).mean()

        # compute conservative loss
        n = self._num_repeat_actions
        random_actions = torch.FloatTensor(batch_size * n, self._action_dim).uniform_(-1.0, 1.0)
        tmp_obss = obss.unsqueeze(1).repeat(1, n, 1).view(batch_size * n, obss.shape[-1])
        tmp_next_obss = next_obss.unsqueeze(1).repeat(1, n, 1).view(batch_size * n, obss.shape[-1])
        obs_pi_value1, obs_pi_value2 = self.calc_pi_values(tmp_obss, tmp_obss)
        next_obs_pi_value1, next_obs_pi_value2 = self.calc_pi_values(tmp_next_obss, tmp_obss)
        random_value1, random_value2 = self.calc_random_values(tmp_obss, random_actions)
        values = [v.reshape(batch_size, n, 1) for v in (obs_pi_value1, obs_pi_value2, next_obs_pi_value1,
                                                         next_obs_pi_value2, random_value1, random_value2)]
        cat_q1 = torch.cat([values[0], values[2], values[4]], 1)
        cat_q2 = torch.cat([values[1], values[3], values[5]], 1)
        t, w = self._temperature, self._cql_weight
        conservative_loss1 = torch.logsumexp(cat_q1 / t, dim=1).mean() * w * t
        conservative_loss2 = torch.logsumexp(cat_q2 / t, dim=1).mean() * w * t
        real_obss, real_actions = real_batch["observations"], real_batch["actions"]
        conservative_loss1 = conservative_loss1 - self.critic1(real_obss, real_actions).mean() * self._cql_weight
        conservative_loss2 = conservative_loss2 - self.critic2(real_obss, real_actions).mean() * self._cql_weight

        critic1_loss = critic1_loss + conservative_loss1
        critic2_loss = critic2_loss + conservative_loss2
        self.critic1_optim.zero_grad()
        critic1_loss.backward(retain_graph=True)
        self.critic1_optim.step()
        self.critic2_optim.zero_grad()
        critic2_loss.backward()
        self.critic2_optim.step()
        self._sync_weight()
        return {"loss/actor": actor_loss.item(), "loss/critic1": critic1_loss.item(),
                "loss/critic2": critic2_loss.item()}


class MBPolicyTrainer:
    def __init__(self, policy, real_buffer, fake_buffer, args, callbacks=()):
        self.policy, self.real_buffer, self.fake_buffer = policy, real_buffer, fake_buffer
        self.args = args
        self.callbacks = list(callbacks)

    def rollout(self):
        obs = self.real_buffer.sample(32)["observations"]
        for _ in range(self.args.rollout_length):
            with torch.no_grad():
                act, _ = self.policy.actforward(obs)
            next_obs, rew, term = self.policy.dynamics.step(obs, act)
            self.fake_buffer.add_batch(observations=obs, actions=act, next_observations=next_obs,
                                       rewards=rew, terminals=term)
            obs = next_obs

    def train_step(self):
        real_n = int(self.args.batch_size * self.args.real_ratio)
        return self.policy.learn({"real": self.real_buffer.sample(real_n),
                                  "fake": self.fake_buffer.sample(self.args.batch_size - real_n)})

    @torch.no_grad()
    def evaluate(self):
        obs = self.real_buffer.sample(128)["observations"]
        act, _ = self.policy.actforward(obs, deterministic=True)
        return {"eval/q": self.policy.critic1(obs, act).mean().item()}

    def train(self):
        for epoch in range(self.args.epoch):
            for _ in range(self.args.step_per_epoch):
                self.rollout()
                logs = self.train_step()
            logs.update(self.evaluate())
            for cb in self.callbacks:
                cb(epoch, logs)


def make_offline_dataset(args, n=1000):
    g = torch.Generator().manual_seed(args.seed)
    obs = torch.randn(n, args.obs_dim, generator=g)
    act = torch.rand(n, args.action_dim, generator=g) * 2 - 1
    A = torch.randn(args.obs_dim, args.obs_dim, generator=g) * 0.1
    B = torch.randn(args.action_dim, args.obs_dim, generator=g) * 0.1
    next_obs = obs + obs @ A + act @ B
    rew = -(obs ** 2).sum(-1, keepdim=True) * 0.1
    return {"observations": obs, "actions": act, "next_observations": next_obs,
            "rewards": rew, "terminals": torch.zeros(n, 1)}


def main(argv=None):
    args = get_args(argv if argv is not None else [])
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    data = make_offline_dataset(args)
    dynamics = EnsembleDynamics(args.obs_dim, args.action_dim)
    print("dynamics loss", dynamics.train(data, args.dynamics_epochs))
    policy = COMBOPolicy(args, dynamics)
    trainer = MBPolicyTrainer(policy, ReplayBuffer(data), ReplayBuffer(), args,
                              callbacks=[lambda e, l: print(e, {k: round(v, 3) for k, v in l.items()})])
    trainer.train()


if __name__ == "__main__":
    main()
