# expect: clean
# shape: the closure runs the model again, so its backward has a graph of its own
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
            second = ((self.model(inputs) - targets) ** 2).mean()
            second.backward()
            return second

        loss.backward()
        self.opt.step(closure)
        return loss.item()


torch.manual_seed(0)
trainer = SAMTrainer(nn.Linear(4, 1))
x, y = torch.randn(16, 4), torch.randn(16, 1)
for _ in range(3):
    trainer.train_step(x, y)
