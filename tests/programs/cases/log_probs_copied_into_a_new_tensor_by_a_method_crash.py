# expect: no_grad_fn
# shape: an agent keeps its log-probs in a dict of lists and a method copies them into a new tensor (`torch.tensor(self.memory["log_probs"])`): the values, not their graph, so the policy loss has no grad_fn
import torch
import torch.nn as nn
from torch.distributions import Categorical

class Agent:
    def __init__(self):
        self.policy = nn.Linear(4, 2)
        self.memory = {"log_probs": [], "rewards": []}

    def act(self, obs):
        m = Categorical(logits=self.policy(obs))
        a = m.sample()
        self.memory["log_probs"].append(m.log_prob(a))
        return a

    def loss(self):
        log_probs = torch.tensor(self.memory["log_probs"])
        return -(log_probs * torch.ones(3)).mean()

agent = Agent()
for _ in range(3):
    agent.act(torch.randn(4))
loss = agent.loss()
loss.backward()  # raises
