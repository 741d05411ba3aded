import torch.nn.functional as F
from spikingjelly.clock_driven.functional import reset_net


def fit_one_epoch(model, optimizer, gen, epoch, epoch_step):
    loss_sum, correct, seen = 0, 0, 0
    model.train()
    for iteration, (frames, labels) in enumerate(gen):
        if iteration >= epoch_step:
            break
        # frames: [N, T, C, H, W] -> [T, N, C, H, W]
        frames = frames.transpose(0, 1)
        outputs = model(frames)
        loss = F.cross_entropy(outputs, labels)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        reset_net(model)

        loss_sum += loss.item() * labels.numel()
        correct += (outputs.argmax(1) == labels).sum().item()
        seen += labels.numel()
    print('Epoch %d: loss %.4f acc %.3f' % (epoch + 1, loss_sum / seen, correct / seen))
