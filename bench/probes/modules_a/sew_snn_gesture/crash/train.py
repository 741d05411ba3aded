# expect: freed_graph
# source: https://github.com/fangwei123456/Spike-Element-Wise-ResNet/issues/19
"""SEW-ResNet spiking network (IF neurons from the installed `spikingjelly`
library) trained with the fit_one_epoch loop from utils_fit.py to classify
synthetic DVS-gesture-like event-frame sequences (T=4 time steps)."""
import torch

from nets import SEWResNet
from utils_fit import fit_one_epoch


def make_event_batches(n_batches, batch_size, T=4, num_classes=11, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        labels = torch.randint(0, num_classes, (batch_size,), generator=g)
        rate = 0.05 + 0.4 * (labels.float() / num_classes).view(-1, 1, 1, 1, 1)
        frames = (torch.rand(batch_size, T, 2, size, size, generator=g) < rate).float()
        batches.append((frames, labels))
    return batches


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SEWResNet(in_channels=2, num_classes=11, width=16, connect_f='ADD')
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = make_event_batches(n_batches=4, batch_size=8)
    for epoch in range(2):
        fit_one_epoch(model, optimizer, gen, epoch, epoch_step=len(gen))  # raises
