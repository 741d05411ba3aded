# expect: clean
# source: https://github.com/pytorch/pytorch/issues/6166
import torch
import torch.nn as nn

torch.manual_seed(0)

num_classes = 4
batch_size, height, width = 2, 16, 16


class TinyFCN(nn.Module):
    def __init__(self, in_ch=3, n_cls=num_classes):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_ch, 8, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Conv2d(8, n_cls, 1)

    def forward(self, x):
        return self.classifier(self.body(x))


model = TinyFCN()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

logsoftmax = nn.LogSoftmax(dim=1)
criterion = nn.NLLLoss()

images = torch.randn(batch_size, 3, height, width)
labels = torch.randint(0, num_classes, (batch_size, height, width))

for step in range(3):
    optimizer.zero_grad()
    outputs = model(images)
    outputs = logsoftmax(outputs)
    loss = criterion(outputs, labels)
    loss.backward()
    optimizer.step()
    print(step, loss.item())
