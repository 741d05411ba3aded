# expect: clean
# shape: the same agent keeps the loss values, not the tensors
import numpy as np
import torch
import torch.nn as nn


class Agent:
    def __init__(self):
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.cost_history = []

    def learn(self, states, targets):
        loss = nn.functional.mse_loss(self.net(states), targets)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.cost_history.append(loss.item())

    def cost_curve(self):
        costs = np.array(self.cost_history)
        return costs.mean()


agent = Agent()
for step in range(3):
    agent.learn(torch.randn(8, 4), torch.randn(8, 2))
print(agent.cost_curve())
