# expect: inplace_version
# shape: a block reaches its stages by name with self.__getattr__, then adds into the input a max-pool saved
import torch
import torch.nn as nn


class ChainedPool(nn.Module):
    def __init__(self, feats, stages=2):
        super().__init__()
        for i in range(stages):
            self.add_module(f"stage{i}", nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1),
                                                       nn.Conv2d(feats, feats, 3, padding=1)))
        self.stages = stages

    def forward(self, x):
        out = x
        for i in range(self.stages):
            out = self.__getattr__(f"stage{i}")(out)
            x += out
        return x


model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), ChainedPool(8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(2, 3, 8, 8)).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
