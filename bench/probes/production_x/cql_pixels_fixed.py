# expect: clean
# source: https://github.com/ray-project/ray/issues/16770
"""Offline CQL (SAC-based) agent learning from pixel observations, RLlib layout.

A convolutional SAC model (actor + twin Q heads over a pixel encoder) is
trained on a fixed replay of image transitions with the conservative
Q-learning penalty.  With ``lagrangian=True`` the CQL weight alpha' is tuned
by dual gradient descent against ``lagrangian_thresh``.  The policy follows
RLlib's split: ``cql_loss`` builds the losses, ``apply_gradients`` runs one
optimizer per loss term.  Transitions are seeded synthetic 3x32x32 frames.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_CONFIG = {
    "twin_q": True,
    "gamma": 0.99,
    "tau": 5e-3,
    "initial_alpha": 1.0,
    "bc_iters": 1,
    "temperature": 1.0,
    "num_actions": 4,
    "min_q_weight": 5.0,
    "lagrangian": True,
    "lagrangian_thresh": 5.0,
    "optimization": {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4, "entropy_learning_rate": 3e-4},
    "train_batch_size": 16,
    "num_iterations": 3,
}


class PixelEncoder(nn.Module):
    def __init__(self, obs_shape, feature_dim=32):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv2d(obs_shape[0], 16, 3, stride=2), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, stride=2), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, *obs_shape)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n_flat, feature_dim), nn.LayerNorm(feature_dim))

    def forward(self, obs):
        return torch.tanh(self.fc(self.convs(obs)))


class SACTorchModel(nn.Module):
    def __init__(self, obs_shape, action_dim, config):
        super().__init__()
        self.action_dim = action_dim
        self.encoder = PixelEncoder(obs_shape)
        self.action_model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2 * action_dim))
        self.q_net = nn.Sequential(nn.Linear(32 + action_dim, 64), nn.ReLU(), nn.Linear(64, 1))
        self.twin_q_net = nn.Sequential(nn.Linear(32 + action_dim, 64), nn.ReLU(), nn.Linear(64, 1))
        self.log_alpha = nn.Parameter(torch.tensor([np.log(config["initial_alpha"])], dtype=torch.float32))
        self.log_alpha_prime = nn.Parameter(torch.zeros(1))
        self.target_entropy = -float(action_dim)

    def get_model_output(self, obs):
        return self.encoder(obs)

    def get_policy_output(self, model_out):
        return self.action_model(model_out)

    def get_q_values(self, model_out, actions):
        return self.q_net(torch.cat([model_out, actions], -1))

    def get_twin_q_values(self, model_out, actions):
        return self.twin_q_net(torch.cat([model_out, actions], -1))

    def policy_variables(self):
        return list(self.action_model.parameters())

    def q_variables(self):
        return list(self.encoder.parameters()) + list(self.q_net.parameters()) + list(self.twin_q_net.parameters())


class SquashedGaussian:
    def __init__(self, inputs):
        mean, log_std = torch.chunk(inputs, 2, dim=-1)
        self.dist = torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp())

    def sample_logp(self):
        raw = self.dist.rsample()
        action = torch.tanh(raw)
        logp = self.dist.log_prob(raw).sum(-1) - torch.log(1 - action.pow(2) + 1e-6).sum(-1)
        return action, logp


def policy_actions_repeat(model, obs_feat, num_repeat):
    obs_temp = obs_feat.unsqueeze(1).repeat(1, num_repeat, 1).view(-1, obs_feat.shape[-1])
    actions, logp = SquashedGaussian(model.get_policy_output(obs_temp)).sample_logp()
    return actions, logp.view(obs_feat.shape[0], num_repeat, 1)


def q_values_repeat(model, obs_feat, actions, twin=False):
    num_repeat = actions.shape[0] // obs_feat.shape[0]
    obs_temp = obs_feat.unsqueeze(1).repeat(1, num_repeat, 1).view(-1, obs_feat.shape[-1])
    q = model.get_twin_q_values(obs_temp, actions) if twin else model.get_q_values(obs_temp, actions)
    return q.view(obs_feat.shape[0], num_repeat, 1)


class CQLTorchPolicy:
    def __init__(self, obs_shape, action_dim, config):
        self.config = config
        self.model = SACTorchModel(obs_shape, action_dim, config)
        self.target_model = SACTorchModel(obs_shape, action_dim, config)
        self.target_model.load_state_dict(self.model.state_dict())
        opt = config["optimization"]
        self._optimizers = [
            torch.optim.Adam(self.model.policy_variables(), lr=opt["actor_learning_rate"]),
            torch.optim.Adam(self.model.q_variables(), lr=opt["critic_learning_rate"]),
            torch.optim.Adam([self.model.log_alpha], lr=opt["entropy_learning_rate"]),
        ]
        if config["lagrangian"]:
            self.alpha_prime_optim = torch.optim.Adam([self.model.log_alpha_prime], lr=opt["critic_learning_rate"])
        self.cur_iter = 0

    def cql_loss(self, train_batch):
        config, model = self.config, self.model
        self.cur_iter += 1
        obs, actions = train_batch["obs"], train_batch["actions"]
        rewards, next_obs, terminals = train_batch["rewards"], train_batch["new_obs"], train_batch["dones"]
        batch_size = obs.shape[0]
        action_low, action_high = -1.0, 1.0

        model_out_t = model.get_model_output(obs)
        model_out_tp1 = model.get_model_output(next_obs)
        target_model_out_tp1 = self.target_model.get_model_output(next_obs)

        policy_t, log_pis_t = SquashedGaussian(model.get_policy_output(model_out_t.detach())).sample_logp()
        alpha = torch.exp(model.log_alpha)
        alpha_loss = -(model.log_alpha * (log_pis_t + model.target_entropy).detach()).mean()

        if self.cur_iter < config["bc_iters"]:
            actor_loss = (alpha.detach() * log_pis_t - SquashedGaussian(
                model.get_policy_output(model_out_t.detach())).dist.log_prob(actions).sum(-1)).mean()
        else:
            q_pi = torch.min(model.get_q_values(model_out_t.detach(), policy_t),
                             model.get_twin_q_values(model_out_t.detach(), policy_t))
            actor_loss = (alpha.detach() * log_pis_t - q_pi.squeeze(-1)).mean()

        # Critic loss
        q_t = model.get_q_values(model_out_t, actions)
        twin_q_t = model.get_twin_q_values(model_out_t, actions)
        with torch.no_grad():
            policy_tp1, log_pis_tp1 = SquashedGaussian(model.get_policy_output(model_out_tp1)).sample_logp()
            q_tp1 = torch.min(self.target_model.get_q_values(target_model_out_tp1, policy_tp1),
                              self.target_model.get_twin_q_values(target_model_out_tp1, policy_tp1))
            q_tp1 = q_tp1.squeeze(-1) - alpha * log_pis_tp1
            q_t_target = rewards + config["gamma"] * (1.0 - terminals) * q_tp1
        critic_loss_1 = F.mse_loss(q_t.squeeze(-1), q_t_target)
        critic_loss_2 = F.mse_loss(twin_q_t.squeeze(-1), q_t_target)

        # CQL penalty
        num_actions = config["num_actions"]
        rand_actions = torch.empty(batch_size * num_actions, actions.shape[-1]).uniform_(action_low, action_high)
        curr_actions, curr_logp = policy_actions_repeat(model, model_out_t.detach(), num_actions)
        next_actions, next_logp = policy_actions_repeat(model, model_out_tp1.detach(), num_actions)
        q1_rand = q_values_repeat(model, model_out_t, rand_actions)
        q2_rand = q_values_repeat(model, model_out_t, rand_actions, twin=True)
        q1_curr = q_values_repeat(model, model_out_t, curr_actions.detach())
        q2_curr = q_values_repeat(model, model_out_t, curr_actions.detach(), twin=True)
        q1_next = q_values_repeat(model, model_out_t, next_actions.detach())
        q2_next = q_values_repeat(model, model_out_t, next_actions.detach(), twin=True)
        random_density = np.log(0.5 ** curr_actions.shape[-1])
        cat_q1 = torch.cat([q1_rand - random_density, q1_next - next_logp.detach(), q1_curr - curr_logp.detach()], 1)
        cat_q2 = torch.cat([q2_rand - random_density, q2_next - next_logp.detach(), q2_curr - curr_logp.detach()], 1)
        min_qf1_loss = torch.logsumexp(cat_q1 / config["temperature"], dim=1).mean() * config["min_q_weight"] * config["temperature"]
        min_qf1_loss = min_qf1_loss - q_t.mean() * config["min_q_weight"]
        min_qf2_loss = torch.logsumexp(cat_q2 / config["temperature"], dim=1).mean() * config["min_q_weight"] * config["temperature"]
        min_qf2_loss = min_qf2_loss - twin_q_t.mean() * config["min_q_weight"]

        if config["lagrangian"]:
            alpha_prime = torch.clamp(model.log_alpha_prime.exp(), min=0.0, max=1000000.0)[0]
            min_qf1_loss = alpha_prime * (min_qf1_loss - config["lagrangian_thresh"])
            min_qf2_loss = alpha_prime * (min_qf2_loss - config["lagrangian_thresh"])
            alpha_prime_loss = 0.5 * (-min_qf1_loss - min_qf2_loss)
            self.alpha_prime_optim.zero_grad()
            alpha_prime_loss.backward(retain_graph=True)
            self.alpha_prime_optim.step()

        critic_loss = critic_loss_1 + min_qf1_loss + critic_loss_2 + min_qf2_loss
        self.stats = {"actor_loss": actor_loss.item(), "critic_loss": critic_loss.item(), "alpha": alpha.item()}
        return actor_loss, critic_loss, alpha_loss

    def apply_gradients(self, losses):
        for opt, loss in zip(self._optimizers, losses):
            opt.zero_grad()
            loss.backward()
            opt.step()

    def update_target(self, tau):
        with torch.no_grad():
            for p, tp in zip(self.model.parameters(), self.target_model.parameters()):
                tp.mul_(1 - tau).add_(tau * p)

    def learn_on_batch(self, train_batch):
        self.apply_gradients(self.cql_loss(train_batch))
        self.update_target(self.config["tau"])
        return self.stats


def offline_dataset(n, obs_shape, action_dim, seed):
    rng = np.random.RandomState(seed)
    f = lambda *s: torch.from_numpy(rng.rand(*s).astype(np.float32))
    return {"obs": f(n, *obs_shape), "new_obs": f(n, *obs_shape), "actions": f(n, action_dim) * 2 - 1,
            "rewards": f(n), "dones": (f(n) > 0.9).float()}


def main():
    torch.manual_seed(0)
    config = dict(DEFAULT_CONFIG)
    obs_shape, action_dim = (3, 32, 32), 2
    data = offline_dataset(64, obs_shape, action_dim, seed=0)
    policy = CQLTorchPolicy(obs_shape, action_dim, config)
    for it in range(config["num_iterations"]):
        idx = torch.randint(0, 64, (config["train_batch_size"],))
        stats = policy.learn_on_batch({k: v[idx] for k, v in data.items()})
        print("iter", it, stats)


if __name__ == "__main__":
    main()
