# expect: clean
# source: https://github.com/pytorch/pytorch/issues/6166
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)

batch_size, num_classes, height, width = 4, 5, 32, 32


class FCN(nn.Module):
    def __init__(self, num_classes):
        super(FCN, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
        )
        self.classifier = nn.Conv2d(32, num_classes, 1)
        self.upsample = nn.ConvTranspose2d(num_classes, num_classes, 4, stride=2, padding=1)

    def forward(self, x):
        x = self.features(x)
        x = self.classifier(x)
        return self.upsample(x)


model = FCN(num_classes)
optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

logsoftmax = nn.LogSoftmax(dim=1)
criterion = torch.nn.NLLLoss()

images = torch.randn(batch_size, 3, height, width)
labels = torch.randint(0, num_classes, (batch_size, height, width))

for epoch in range(3):
    optimizer.zero_grad()
    outputs = model(images)
    outputs = logsoftmax(outputs)
    loss = criterion(outputs, labels)
    loss.backward()
    optimizer.step()
    print('epoch %d loss %.4f' % (epoch, loss.mean().item()))
