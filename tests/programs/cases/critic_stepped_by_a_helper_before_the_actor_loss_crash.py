# expect: inplace_version
# shape: actor and critic losses computed together, then each optimised by one helper (`_optimize(opt, loss)`: zero_grad, backward, step); the critic's step changes the weights the actor loss saved (it runs through the critic), so the actor's backward raises inside the helper
import torch
import torch.nn as nn


class Agent:
    def __init__(self):
        self.actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.critic = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=1e-3)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1e-3)

    def losses(self, obs, act, target):
        q = self.critic(torch.cat([obs, act], dim=1))
        critic_loss = (q - target).pow(2).mean()
        q_pi = self.critic(torch.cat([obs, self.actor(obs)], dim=1))
        return critic_loss, -q_pi.mean()

    def _optimize(self, opt, loss):
        opt.zero_grad()
        loss.backward()  # raises
        opt.step()

    def update(self, obs, act, target):
        critic_loss, actor_loss = self.losses(obs, act, target)
        self._optimize(self.critic_opt, critic_loss)
        self._optimize(self.actor_opt, actor_loss)


agent = Agent()
agent.update(torch.randn(8, 4), torch.randn(8, 2), torch.randn(8, 1))
