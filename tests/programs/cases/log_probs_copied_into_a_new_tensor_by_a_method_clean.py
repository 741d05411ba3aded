# expect: clean
# shape: the twin of log_probs_copied_into_a_new_tensor_by_a_method_crash.py that stacks the log-probs (`torch.stack`), keeping their graph
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
        log_probs = torch.stack(self.memory["log_probs"])
        return -(log_probs * torch.ones(3)).mean()

agent = Agent()
for _ in range(3):
    agent.act(torch.randn(4))
loss = agent.loss()
loss.backward()
