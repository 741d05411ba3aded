# expect: clean
# shape: the same trainer averages the weighted map before its backward
import torch
import torch.nn as nn


class TinySegNet(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, n_classes, 1))

    def forward(self, x):
        return self.body(x)


class Trainer:
    def __init__(self, batch_size=2):
        self.batch_size = batch_size
        self.model = TinySegNet()
        self.criterion = nn.CrossEntropyLoss(reduction="none")
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def step(self, images, labels, weights):
        self.optimizer.zero_grad()
        per_pixel = self.criterion(self.model(images), labels)
        loss = (per_pixel * weights).mean()
        loss.backward()
        self.optimizer.step()


trainer = Trainer()
images = torch.randn(trainer.batch_size, 3, 8, 8)
labels = torch.randint(0, 4, (trainer.batch_size, 8, 8))
trainer.step(images, labels, torch.rand(trainer.batch_size, 8, 8))
