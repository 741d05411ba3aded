# expect: clean
# shape: SAM's two steps: the second step's loss runs the model again (the cache is only for
# logging), so its backward has a graph of its own
import torch
import torch.nn as nn
import torch.nn.functional as F


class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self._logits = {}

    def logits(self, inputs):
        key = id(inputs)
        if key not in self._logits:
            self._logits = {key: self.model(inputs)}
        return self._logits[key]

    def train_step(self, inputs, targets):
        F.cross_entropy(self.logits(inputs), targets).backward()
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(0.01 * p.grad.sign())
        self.opt.zero_grad()
        F.cross_entropy(self.model(inputs), targets).backward()
        self.opt.step()


torch.manual_seed(0)
trainer = Trainer(nn.Linear(4, 3))
inputs, targets = torch.randn(8, 4), torch.randint(0, 3, (8,))
trainer.train_step(inputs, targets)
