# expect: clean
# source: https://github.com/noahgolmant/pytorch-hessian-eigenthings/issues/30
"""Stable-SGD continual-learning experiment on split CIFAR-100 (synthetic
stand-in): a reduced multi-head ResNet-18 is trained task by task and, after
each task, the top eigenvalues of the loss Hessian are logged with the vendored
hessian_eigenthings library (HVP operator + deflated power iteration)."""
import torch
import torch.nn as nn
from torch.nn.functional import relu, avg_pool2d
from torch.utils.data import DataLoader, TensorDataset

DEVICE = "cpu"
config = {"dropout": 0.0, "lr": 0.1, "gamma": 0.8, "batch_size": 16, "tasks": 2,
          "epochs_per_task": 1, "nf": 4, "num_eigenthings": 2, "power_iter_steps": 2}


# ----------------------------------------------------------------- models.py
def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1, config={}):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(in_planes, planes, stride)
        self.conv2 = conv3x3(planes, planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False))
        self.IC1 = nn.Sequential(nn.BatchNorm2d(planes), nn.Dropout(p=config['dropout']))
        self.IC2 = nn.Sequential(nn.BatchNorm2d(planes), nn.Dropout(p=config['dropout']))

    def forward(self, x):
        out = self.conv1(x)
        out = relu(out)
        out = self.IC1(out)
        out += self.shortcut(x)
        out = relu(out)
        out = self.IC2(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes, nf, config={}):
        super(ResNet, self).__init__()
        self.in_planes = nf
        self.conv1 = conv3x3(3, nf * 1)
        self.bn1 = nn.BatchNorm2d(nf * 1)
        self.layer1 = self._make_layer(block, nf * 1, num_blocks[0], stride=1, config=config)
        self.layer2 = self._make_layer(block, nf * 2, num_blocks[1], stride=2, config=config)
        self.linear = nn.Linear(nf * 2 * block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride, config):
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride, config=config))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x, task_id):
        bsz = x.size(0)
        out = relu(self.bn1(self.conv1(x.view(bsz, 3, 16, 16))))
        out = self.layer1(out)
        out = self.layer2(out)
        out = avg_pool2d(out, 8)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        t = task_id
        offset1, offset2 = int((t - 1) * 5), int(t * 5)
        if offset1 > 0:
            out[:, :offset1].data.fill_(-10e10)
        if offset2 < 100:
            out[:, offset2:100].data.fill_(-10e10)
        return out


# ---------------------------------------------------- hessian_eigenthings
class HVPOperator:
    def __init__(self, model, dataloader, criterion, full_dataset=True):
        self.size = int(sum(p.numel() for p in model.parameters()))
        self.model = model
        self.dataloader = dataloader
        self.dataloader_iter = iter(dataloader)
        self.criterion = criterion
        self.full_dataset = full_dataset

    def apply(self, vec):
        if self.full_dataset:
            return self._apply_full(vec)
        return self._apply_batch(vec)

    def _apply_batch(self, vec):
        self.zero_grad()
        grad_vec = self.prepare_grad()
        self.zero_grad()
        params = list(self.model.parameters())
        grad_grad = torch.autograd.grad(grad_vec, params, grad_outputs=vec,
                                        only_inputs=True, allow_unused=True)
        return torch.cat([(torch.zeros_like(p) if g is None else g).contiguous().view(-1)
                          for g, p in zip(grad_grad, params)])

    def _apply_full(self, vec):
        n = len(self.dataloader)
        hessian_vec_prod = None
        for _ in range(n):
            if hessian_vec_prod is not None:
                hessian_vec_prod += self._apply_batch(vec)
            else:
                hessian_vec_prod = self._apply_batch(vec)
        return hessian_vec_prod / n

    def zero_grad(self):
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.data.zero_()

    def prepare_grad(self):
        try:
            inputs, targets = next(self.dataloader_iter)
        except StopIteration:
            self.dataloader_iter = iter(self.dataloader)
            inputs, targets = next(self.dataloader_iter)
        output = self.model(inputs)
        loss = self.criterion(output, targets)
        params = list(self.model.parameters())
        grad_dict = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
        return torch.cat([(torch.zeros_like(p) if g is None else g).contiguous().view(-1)
                          for g, p in zip(grad_dict, params)])


def power_iteration(operator, steps, init_vec=None):
    vec = torch.rand(operator.size) if init_vec is None else init_vec
    vec = vec / torch.norm(vec)
    eigenvalue = None
    for _ in range(steps):
        new_vec = operator.apply(vec).detach()
        eigenvalue = torch.dot(new_vec, vec).item()
        vec = new_vec / (torch.norm(new_vec) + 1e-12)
    return eigenvalue, vec


def deflated_power_iteration(operator, num_eigenthings, power_iter_steps):
    eigenvals, eigenvecs = [], []
    base_apply = operator.apply
    for _ in range(num_eigenthings):
        val, vec = power_iteration(operator, power_iter_steps)
        eigenvals.append(val)
        eigenvecs.append(vec)

        def _deflate(x, val=val, vec=vec, prev=operator.apply):
            return prev(x) - val * torch.dot(vec, x) * vec
        operator.apply = _deflate
    operator.apply = base_apply
    return eigenvals, eigenvecs


# -------------------------------------------------------------------- main.py
class TaskModel(nn.Module):
    def __init__(self, net, task_id):
        super().__init__()
        self.net, self.task_id = net, task_id

    def forward(self, x):
        return self.net(x, self.task_id)


def get_split_cifar100_task(task_id, n=32):
    g = torch.Generator().manual_seed(task_id)
    x = torch.rand(n, 3 * 16 * 16, generator=g)
    y = torch.randint((task_id - 1) * 5, task_id * 5, (n,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=config["batch_size"], shuffle=False)


def train_single_epoch(net, optimizer, loader, criterion, task_id):
    net.train()
    for data, target in loader:
        optimizer.zero_grad()
        loss = criterion(net(data, task_id), target)
        loss.backward()
        optimizer.step()
    return loss.item()


def log_hessian(net, loader, task_id):
    criterion = nn.CrossEntropyLoss()
    net.eval()
    op = HVPOperator(TaskModel(net, task_id), loader, criterion, full_dataset=True)
    eigenvals, _ = deflated_power_iteration(op, config["num_eigenthings"], config["power_iter_steps"])
    print("task %d  top hessian eigenvalues: %s" % (task_id, ["%.3f" % e for e in eigenvals]))


def main():
    torch.manual_seed(0)
    net = ResNet(BasicBlock, [1, 1], 100, config["nf"], config=config).to(DEVICE)
    criterion = nn.CrossEntropyLoss()
    for task_id in range(1, config["tasks"] + 1):
        loader = get_split_cifar100_task(task_id)
        lr = max(config["lr"] * config["gamma"] ** (task_id - 1), 0.00005)
        optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.8)
        for _ in range(config["epochs_per_task"]):
            loss = train_single_epoch(net, optimizer, loader, criterion, task_id)
        print("task %d  train loss %.4f" % (task_id, loss))
        log_hessian(net, loader, task_id)


if __name__ == "__main__":
    main()
