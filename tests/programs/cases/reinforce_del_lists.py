# expect: clean
# shape: REINFORCE: log-probs collected on the policy, cleared with `del lst[:]` after each backward
import torch
import torch.nn as nn
import torch.nn.functional as F


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = nn.Linear(4, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        return F.softmax(self.affine(x), dim=1)


policy = Policy()
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)


def select_action(state):
    probs = policy(state)
    m = torch.distributions.Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    policy_loss = []
    for log_prob, r in zip(policy.saved_log_probs, policy.rewards):
        policy_loss.append(-log_prob * r)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]


for episode in range(3):
    for t in range(4):
        select_action(torch.randn(1, 4))
        policy.rewards.append(1.0)
    finish_episode()
