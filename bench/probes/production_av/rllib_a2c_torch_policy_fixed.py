# expect: clean
# source: https://github.com/ray-project/ray/issues/3694
"""A2C on a small CartPole-like environment, written in the style of RLlib 0.6's
PyTorch policy graphs: a generic ``TorchPolicyGraph`` that handles the plumbing
(locking, action computation, gradients), an ``A3CLoss`` module, an
``A3CTorchPolicyGraph`` subclass with value-function extra outputs and GAE
post-processing, a ``PolicyEvaluator`` that samples rollouts, and an
``A2CAgent`` that drives synchronous training iterations (regression-test style).
"""
import threading
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_CONFIG = {
    "gamma": 0.99,
    "lambda": 1.0,
    "use_gae": True,
    "sample_batch_size": 20,
    "lr": 0.0007,
    "grad_clip": 40.0,
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.01,
    "model": {"fcnet_hiddens": [32, 32], "fcnet_activation": "tanh"},
    "seed": 0,
}


class CartPoleEnv(object):
    """Deterministic-physics cart-pole with seeded initial states."""

    def __init__(self, seed=0):
        self.rng = np.random.RandomState(seed)
        self.observation_dim = 4
        self.num_actions = 2
        self.state = None
        self.steps = 0

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=(4,))
        self.steps = 0
        return self.state.astype(np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sintheta) / 1.1
        thetaacc = (9.8 * sintheta - costheta * temp) / (
            0.5 * (4.0 / 3.0 - 0.1 * costheta ** 2 / 1.1))
        xacc = temp - 0.05 * thetaacc * costheta / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * xacc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        done = bool(abs(x) > 2.4 or abs(theta) > 0.21 or self.steps >= 200)
        return self.state.astype(np.float32), 1.0, done, {}


class SampleBatch(object):
    OBS = "obs"
    DONES = "dones"
    NEXT_OBS = "new_obs"

    def __init__(self, data):
        self.data = {k: np.array(v) for k, v in data.items()}
        self.count = len(self.data[self.OBS])

    def __getitem__(self, key):
        return self.data[key]


def discount(x, gamma):
    out = np.zeros_like(x, dtype=np.float32)
    running = 0.0
    for t in reversed(range(len(x))):
        running = x[t] + gamma * running
        out[t] = running
    return out


def compute_advantages(rollout, last_r, gamma=0.9, lambda_=1.0, use_gae=True):
    traj = rollout.data
    if use_gae:
        vpred_t = np.concatenate([rollout["vf_preds"], np.array([last_r])])
        delta_t = traj["rewards"] + gamma * vpred_t[1:] - vpred_t[:-1]
        traj["advantages"] = discount(delta_t, gamma * lambda_)
        traj["value_targets"] = (traj["advantages"] +
                                 traj["vf_preds"]).astype(np.float32)
    traj["advantages"] = traj["advantages"].astype(np.float32)
    return rollout


class FullyConnectedNetwork(nn.Module):
    """Returns (logits, features, value, state) like rllib's TorchModel."""

    def __init__(self, obs_dim, num_outputs, options):
        super(FullyConnectedNetwork, self).__init__()
        act = nn.Tanh if options["fcnet_activation"] == "tanh" else nn.ReLU
        layers, last = [], obs_dim
        for size in options["fcnet_hiddens"]:
            layers += [nn.Linear(last, size), act()]
            last = size
        self.hidden_layers = nn.Sequential(*layers)
        self.logits = nn.Linear(last, num_outputs)
        self.value_branch = nn.Linear(last, 1)

    def forward(self, input_dict, hidden_state):
        features = self.hidden_layers(input_dict["obs"])
        logits = self.logits(features)
        value = self.value_branch(features).squeeze(1)
        return logits, features, value, hidden_state


class A3CLoss(nn.Module):
    def __init__(self, policy_model, vf_loss_coeff=0.5, entropy_coeff=0.01):
        super(A3CLoss, self).__init__()
        self.policy_model = policy_model
        self.vf_loss_coeff = vf_loss_coeff
        self.entropy_coeff = entropy_coeff

    def forward(self, observations, actions, advantages, value_targets):
        logits, _, values, _ = self.policy_model({"obs": observations}, [])
        log_probs = F.log_softmax(logits, dim=1)
        probs = F.softmax(logits, dim=1)
        action_log_probs = log_probs.gather(1, actions.view(-1, 1))
        entropy = -(log_probs * probs).sum(-1).sum()
        pi_err = -advantages.dot(action_log_probs.reshape(-1))
        value_err = F.mse_loss(values.reshape(-1), value_targets)
        return pi_err + value_err * self.vf_loss_coeff - entropy * self.entropy_coeff


class PolicyGraph(object):
    def __init__(self, observation_space, action_space, config):
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None,
                               episode=None):
        return sample_batch


class TorchPolicyGraph(PolicyGraph):

    def __init__(self, observation_space, action_space, model, loss,
                 loss_inputs, config):
        PolicyGraph.__init__(self, observation_space, action_space, config)
        self.lock = threading.Lock()
        self._model = model
        self._loss = loss
        self._loss_inputs = loss_inputs
        self._optimizer = self.optimizer()

    def extra_action_out(self, model_out):
        return {}

    def optimizer(self):
        return torch.optim.Adam(self._model.parameters())

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, episodes=None):
        if state_batches:
            raise NotImplementedError("Torch RNN support")
        with self.lock:
            with torch.no_grad():
                ob = torch.from_numpy(np.array(obs_batch)).float()
                model_out = self._model({"obs": ob}, state_batches)
                logits, _, vf, state = model_out
                actions = F.softmax(logits, dim=1).multinomial(1).squeeze(1)
                return (actions.numpy(), [h.numpy() for h in state],
                        self.extra_action_out(model_out))

    def compute_gradients(self, postprocessed_batch):
        with self.lock:
            loss_in = []
            for key in self._loss_inputs:
                loss_in.append(torch.from_numpy(postprocessed_batch[key]))
            loss_out = self._loss(*loss_in)
            self._optimizer.zero_grad()
            loss_out.backward()
            grads = [p.grad.data.numpy() for p in self._model.parameters()]
            return grads, {"policy_loss": float(loss_out.item())}

    def apply_gradients(self, gradients):
        with self.lock:
            for g, p in zip(gradients, self._model.parameters()):
                p.grad = torch.from_numpy(g)
            self._optimizer.step()
            return {}


class A3CTorchPolicyGraph(TorchPolicyGraph):

    def __init__(self, obs_space, action_space, config):
        config = dict(DEFAULT_CONFIG, **config)
        self.config = config
        torch.manual_seed(config["seed"])
        self.model = FullyConnectedNetwork(obs_space, action_space, config["model"])
        loss = A3CLoss(self.model, config["vf_loss_coeff"], config["entropy_coeff"])
        TorchPolicyGraph.__init__(
            self, obs_space, action_space, self.model, loss,
            loss_inputs=["obs", "actions", "advantages", "value_targets"],
            config=config)

    def extra_action_out(self, model_out):
        return {"vf_preds": model_out[2].numpy()}

    def optimizer(self):
        return torch.optim.Adam(self._model.parameters(), lr=self.config["lr"])

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None,
                               episode=None):
        completed = sample_batch[SampleBatch.DONES][-1]
        if completed:
            last_r = 0.0
        else:
            last_r = self._value(sample_batch[SampleBatch.NEXT_OBS][-1])
        return compute_advantages(sample_batch, last_r, self.config["gamma"],
                                  self.config["lambda"], self.config["use_gae"])

    def _value(self, obs):
        with self.lock:
            with torch.no_grad():
                obs = torch.from_numpy(obs).float().unsqueeze(0)
                _, _, vf, _ = self.model({"obs": obs}, [])
                return vf.numpy().squeeze()


class PolicyEvaluator(object):
    def __init__(self, env_creator, policy_graph, config):
        self.env = env_creator(config)
        self.policy = policy_graph(self.env.observation_dim, self.env.num_actions,
                                   config)
        self.batch_steps = config["sample_batch_size"]
        self.last_obs = self.env.reset()
        self.episode_rewards = []
        self._episode_reward = 0.0

    def sample(self):
        columns = defaultdict(list)
        for _ in range(self.batch_steps):
            actions, _, extra = self.policy.compute_actions([self.last_obs], [])
            action = int(actions[0])
            new_obs, reward, done, _ = self.env.step(action)
            columns["obs"].append(self.last_obs)
            columns["actions"].append(action)
            columns["rewards"].append(reward)
            columns["dones"].append(done)
            columns["new_obs"].append(new_obs)
            for k, v in extra.items():
                columns[k].append(v[0])
            self._episode_reward += reward
            if done:
                self.episode_rewards.append(self._episode_reward)
                self._episode_reward = 0.0
                self.last_obs = self.env.reset()
                break
            self.last_obs = new_obs
        batch = SampleBatch(columns)
        return self.policy.postprocess_trajectory(batch)


class A2CAgent(object):
    def __init__(self, config):
        self.config = dict(DEFAULT_CONFIG, **config)
        self.local_evaluator = PolicyEvaluator(
            lambda c: CartPoleEnv(c["seed"]), A3CTorchPolicyGraph, self.config)
        self.iteration = 0

    def _train(self):
        batch = self.local_evaluator.sample()
        policy = self.local_evaluator.policy
        grads, info = policy.compute_gradients(batch)
        total = float(np.sqrt(sum(float((g ** 2).sum()) for g in grads)))
        if total > self.config["grad_clip"]:
            grads = [g * (self.config["grad_clip"] / total) for g in grads]
        policy.apply_gradients(grads)
        self.iteration += 1
        rewards = self.local_evaluator.episode_rewards[-10:]
        info["episode_reward_mean"] = float(np.mean(rewards)) if rewards else 0.0
        info["timesteps_this_iter"] = batch.count
        return info


def main():
    agent = A2CAgent({"sample_batch_size": 20, "seed": 0})
    for i in range(30):
        result = agent._train()
        if i % 10 == 0:
            print("iter", i, "loss %.3f" % result["policy_loss"],
                  "reward_mean %.1f" % result["episode_reward_mean"])
    print("done, iterations:", agent.iteration)


if __name__ == "__main__":
    main()
