# expect: inplace_version
# shape: a differentiable simulator advanced in place (`vel += acc * dt`) for a known twenty steps, rewards appended to a list and stacked after the loop: the second step's norm saved the velocity the third step modifies, so the stack surely holds a stale graph
import torch
import torch.nn as nn


class Integrator:
    @staticmethod
    def integrate(pos, vel, acc, dt):
        pos += vel * dt
        vel += acc * dt
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
loss.backward()  # raises
