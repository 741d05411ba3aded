# expect: no_grad_fn
# shape: REINFORCE log-probs appended to an attribute list by one function, copied with torch.tensor in another
import torch
import torch.nn as nn
from torch.distributions import Categorical


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 2)
        self.log_probs = []

    def act(self, state):
        dist = Categorical(logits=self.head(state))
        action = dist.sample()
        self.log_probs.append(dist.log_prob(action))
        return action.item()


def update(agent, opt):
    lp = torch.tensor(agent.log_probs)
    loss = -(lp * torch.ones(len(agent.log_probs))).sum()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
    agent.log_probs.clear()


agent = Agent()
opt = torch.optim.Adam(agent.parameters(), lr=0.01)
for episode in range(2):
    for t in range(5):
        agent.act(torch.randn(4))
    update(agent, opt)
