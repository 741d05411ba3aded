# expect: freed_graph
# shape: a closure defined before a backward reads a local whose graph that backward frees; the optimizer calls it after
import torch
import torch.nn as nn


class SAMTrainer:
    """One sharpness-aware step: the first backward, then the optimizer's closure for the second."""

    def __init__(self, model, lr=0.05):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=lr)

    def train_step(self, inputs, targets):
        out = self.model(inputs)
        loss = ((out - targets) ** 2).mean()

        def closure():
            self.opt.zero_grad()
            second = ((out - targets) ** 2).mean()
            second.backward()  # raises
            return second

        loss.backward()
        self.opt.step(closure)
        return loss.item()


torch.manual_seed(0)
trainer = SAMTrainer(nn.Linear(4, 1))
x, y = torch.randn(16, 4), torch.randn(16, 1)
for _ in range(3):
    trainer.train_step(x, y)
