# expect: clean
# shape: the snapshot is turned back into tensors before the proximal term
import numpy as np
import torch
import torch.nn as nn


def get_parameters(net):
    return [val.cpu().numpy() for _, val in net.state_dict().items()]


def train(net, batches, global_params, mu=0.01):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        prox = 0.0
        for local_weights, global_weights in zip(net.parameters(), global_params):
            prox += (local_weights - torch.as_tensor(global_weights)).norm(2) ** 2
        (loss + mu / 2 * prox).backward()
        opt.step()


torch.manual_seed(0)
net = nn.Linear(4, 1)
snapshot = [p.copy() for p in get_parameters(net)]
train(net, [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(2)], snapshot)
