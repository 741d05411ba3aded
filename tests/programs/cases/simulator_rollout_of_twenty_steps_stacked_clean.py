# expect: clean
# shape: the twin of simulator_rollout_of_twenty_steps_stacked_crash.py whose integrator makes new tensors (`vel = vel + acc * dt`): nothing saved is modified, twenty steps stack and backpropagate
import torch
import torch.nn as nn


class Integrator:
    @staticmethod
    def integrate(pos, vel, acc, dt):
        pos = pos + vel * dt
        vel = vel + acc * dt
        return pos, vel


class Body:
    def __init__(self, n):
        self.pos = torch.zeros(n, 3)
        self.vel = torch.zeros(n, 3)

    def drag(self):
        speed = self.vel.norm(dim=1, keepdim=True)
        return -0.1 * self.vel * speed

    def advance(self, force):
        acc = force + self.drag()
        self.pos, self.vel = Integrator.integrate(self.pos, self.vel, acc, 0.05)
        return -(self.pos - 1.0).pow(2).sum() - 0.1 * self.vel.pow(2).sum()


def rollout(policy, body, horizon):
    rewards = []
    for _ in range(horizon):
        rewards.append(body.advance(policy(torch.cat([body.pos, body.vel], dim=1))))
    return torch.stack(rewards)


policy = nn.Linear(6, 3)
loss = -rollout(policy, Body(4), 20).mean()
loss.backward()
