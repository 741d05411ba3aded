# expect: inplace_version
# source: https://github.com/juntang-zhuang/torch_ACA/issues/1
"""ODE-ResNet classifier trained with the adaptive checkpoint adjoint (ACA) solver.

The step size is searched without a graph (torch.no_grad); the accepted step is then
recomputed with a graph, so only the accepted grid is kept for the backward pass.
"""
import argparse
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init

torch.manual_seed(0)
np.random.seed(0)
SAFETY = 0.9
MIN_FACTOR = 0.2  # Minimum allowed decrease in a step size.
MAX_FACTOR = 10  # Maximum allowed increase in a step size.


def extract_keys(options):
    keys = ["h", "t0", "t1", "rtol", "atol", "neval_max", "safety"]
    return {k: options[k] for k in keys if k in options}


class AdaptiveGridSolver(nn.Module):
    order = NotImplemented

    def __init__(self, func, t0=0.0, t1=1.0, h=None, rtol=1e-3, atol=1e-6, neval_max=500000,
                 step_dif_ratio=1e-3, safety=None):
        super(AdaptiveGridSolver, self).__init__()
        self.func = func
        self.t0, self.t1, self.h = t0, t1, h
        self.rtol, self.atol = rtol, atol
        self.neval_max, self.neval = neval_max, 0
        # if two stepsizes are too similar, not update it, otherwise stuck in a loop
        self.step_dif_ratio = step_dif_ratio
        self.time_direction = 1.0 if self.t1 > self.t0 else -1.0
        self.safety = safety if safety is not None else SAFETY

    def norm(self, x):
        return torch.sqrt(torch.mean(x ** 2))

    def select_initial_step_scipy(self, t0, y0, f0):
        """Empirically select a good initial step (Hairer, Norsett, Wanner, Sec. II.4)."""
        scale = self.atol + torch.abs(y0) * self.rtol
        d0, d1 = self.norm(y0 / scale), self.norm(f0 / scale)
        h0 = 1e-6 if (d0.item() < 1e-5 or d1.item() < 1e-5) else 0.01 * d0 / d1
        f1 = self.func(t0 + h0 * self.time_direction, y0 + h0 * self.time_direction * f0)
        d2 = self.norm((f1 - f0) / scale) / h0
        if d1.item() <= 1e-15 and d2.item() <= 1e-15:
            h1 = max(1e-6, h0 * 1e-3)
        else:
            h1 = (0.01 / max(d1.item(), d2.item())) ** (1 / (self.order + 1))
        return float(min(100 * h0, h1))

    def delete_local_computation_graph(self, inputs):
        for i in inputs:
            i.set_()

    def adapt_stepsize(self, y, y_new, error, h_abs, step_accepted):
        scale = self.atol + torch.max(torch.abs(y), torch.abs(y_new)) * self.rtol
        error_norm = self.norm(error / scale).item()
        if error_norm == 0.0:
            factor, step_accepted = MAX_FACTOR, True
        elif error_norm < 1:
            factor = min(MAX_FACTOR, max(1, self.safety * error_norm ** (-1 / (self.order + 1))))
            step_accepted = True
        else:
            factor = max(MIN_FACTOR, self.safety * error_norm ** (-1 / (self.order + 1)))
            step_accepted = False
        h_abs = h_abs * factor
        if torch.is_tensor(h_abs):
            h_abs = float(h_abs.item())
        return h_abs, step_accepted

    def before_integrate(self, y0, t_eval):
        assert isinstance(t_eval, list), 't_eval must be of type list'
        self.t_eval = copy.deepcopy(t_eval)
        self.t_end = self.t_eval.pop(0)

    def update_t_end(self):
        self.t_end = self.t_eval.pop(0) if self.t_eval else None

    def integrate(self, y0, t_eval=None):
        all_evaluations = []  # record outputs at t_eval
        self.before_integrate(y0, t_eval)
        state0 = self.func.state_dict()
        y_current, t_current = y0, self.t0

        h_current = self.h
        if h_current is None:  # select initial step
            _y0 = y0.clone().detach()
            with torch.no_grad():
                _f0 = self.func(self.t0, _y0)
                h_current = self.select_initial_step_scipy(t_current, _y0, _f0)
            self.delete_local_computation_graph([_y0, _f0])

        self.neval = 0  # number of evaluation steps
        self.func.load_state_dict(state0)

        while (self.t_end is not None) and self.neval < self.neval_max:
            step_accepted = False
            self.neval += 1
            h_new = h_current
            state0 = self.func.state_dict()

            # Determine optimal stepsize, without building a graph
            while not step_accepted:
                with torch.no_grad():
                    y_detach = y_current.clone().detach()
                    h_current = h_new
                    _y_new, _error, _variables = self.step(self.func, t_current, h_current * self.time_direction,
                                                           y_detach, return_variables=True)
                    h_new, step_accepted = self.adapt_stepsize(y_detach, _y_new, _error, h_current, step_accepted)
                    if not step_accepted:
                        if abs(h_new - h_current) / h_current < self.step_dif_ratio:
                            step_accepted = True
                    self.delete_local_computation_graph([y_detach, _y_new, _error] + list(_variables))

                # restore state dict to before integrate
                self.func.load_state_dict(state0)

            # step forward, this time with a graph
            y_old = y_current
            y_current, error, variables = self.step(self.func, t_current, h_current * self.time_direction,
                                                    y_current, return_variables=True)
            while (self.t_end is not None) and \
                    abs(t_current + h_current * self.time_direction - self.t0) > abs(self.t_end - self.t0) and \
                    abs(t_current - self.t0) <= abs(self.t_end - self.t0):
                all_evaluations.append(
                    self.interpolate(t_current, t_current + h_current * self.time_direction, self.t_end,
                                     y_old, y_current, variables))
                self.update_t_end()
            t_current = t_current + h_current * self.time_direction
            h_current = h_new

        return all_evaluations[0] if len(all_evaluations) == 1 else torch.stack(all_evaluations, 0)

    def interpolate(self, t_old, t_new, t_eval, y0, y1, k):
        K = torch.stack(k, dim=1).view(y0.shape[0], self.n_stages + 1, -1).permute(0, 2, 1)
        Q = torch.matmul(K, self.P.to(y0.device))  # N x -1 x n_stages
        x = (t_eval - t_old) / (t_new - t_old)
        p = torch.from_numpy(np.cumprod(np.tile(x, Q.shape[-1]))).float().to(y0.device)
        return y0 + torch.matmul(Q, p).view(y0.shape)


class RK23(AdaptiveGridSolver):
    order = 2
    n_stages = 3
    P = torch.from_numpy(np.array([[1, -4 / 3, 5 / 9],
                                   [0, 1, -2 / 3],
                                   [0, 4 / 3, -8 / 9],
                                   [0, -1, 1]])).float()

    def step(self, func, t, dt, y, return_variables=False):
        k1 = dt * func(t, y)
        k2 = dt * func(t + dt / 2.0, y + 1.0 / 2.0 * k1)
        k3 = dt * func(t + dt * 0.75, y + 0.75 * k2)
        k4 = dt * func(t + dt, y + 2. / 9. * k1 + 1. / 3. * k2 + 4. / 9. * k3)
        out1 = y + 2. / 9. * k1 + 1. / 3. * k2 + 4. / 9. * k3
        error = 5 / 72 * k1 - 1 / 12 * k2 - 1 / 9 * k3 + 1 / 8 * k4
        return (out1, error, [k1, k2, k3, k4]) if return_variables else (out1, error)


def odesolve(func, z0, options, **kwargs):
    hyperparams = extract_keys(options)
    if options['method'] == 'RK23':
        solver = RK23(func, **hyperparams, **kwargs)
    else:
        raise ValueError('Name of solver not found.')
    return solver.integrate(z0, t_eval=[options['t1']])


# ----------------------------------------------------------------------------- model
parser = argparse.ArgumentParser()
parser.add_argument('--method', type=str, choices=['RK23'], default='RK23')
parser.add_argument('--num_epochs', type=int, default=1)
parser.add_argument('--lr', type=float, default=0.1)
parser.add_argument('--h', type=float, default=None, help='Initial Stepsize')
parser.add_argument('--t0', type=float, default=0.0, help='Initial time')
parser.add_argument('--t1', type=float, default=1.0, help='End time')
parser.add_argument('--rtol', type=float, default=1e-3, help='Releative tolerance')
parser.add_argument('--atol', type=float, default=1e-3, help='Absolute tolerance')
parser.add_argument('--neval_max', type=int, default=50000)
parser.add_argument('--batch_size', type=int, default=8)
args = parser.parse_args([])


class ODEfunc(nn.Module):
    def __init__(self, dim):
        super(ODEfunc, self).__init__()
        self.conv1, self.bn1 = nn.Conv2d(dim, dim, 3, 1, 1, bias=False), nn.BatchNorm2d(dim)
        self.conv2, self.bn2 = nn.Conv2d(dim, dim, 3, 1, 1, bias=False), nn.BatchNorm2d(dim)
        self.nfe = 0

    def forward(self, t, x):
        self.nfe += 1
        out = F.relu(self.bn1(self.conv1(x)))
        return self.bn2(self.conv2(out))


class ODEBlock(nn.Module):
    def __init__(self, odefunc):
        super(ODEBlock, self).__init__()
        self.odefunc = odefunc
        self.options = {'method': args.method, 'h': args.h, 't0': args.t0, 't1': args.t1,
                        'rtol': args.rtol, 'atol': args.atol, 'neval_max': args.neval_max}

    def forward(self, x):
        return odesolve(self.odefunc, x, self.options)

    @property
    def nfe(self):
        return self.odefunc.nfe


class ODEResNet(nn.Module):
    def __init__(self, block, num_classes=10, width=8):
        super(ODEResNet, self).__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.ode = block(ODEfunc(width))
        self.linear = nn.Linear(width, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.ode(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def conv_init(m):
    class_name = m.__class__.__name__
    if class_name.find('Conv') != -1:
        init.xavier_uniform_(m.weight, gain=np.sqrt(2))
    elif class_name.find('BatchNorm') != -1:
        init.constant_(m.weight, 1)
        init.constant_(m.bias, 0)


def lr_schedule(lr, epoch):
    optim_factor = 2 if epoch > 60 else (1 if epoch > 30 else 0)
    return lr / math.pow(10, optim_factor)


# synthetic CIFAR-like data
train_x = torch.randn(32, 3, 16, 16)
train_y = torch.randint(0, 10, (32,))
test_x = torch.randn(16, 3, 16, 16)
test_y = torch.randint(0, 10, (16,))
train_loader = list(zip(train_x.split(args.batch_size), train_y.split(args.batch_size)))
test_loader = list(zip(test_x.split(args.batch_size), test_y.split(args.batch_size)))

net = ODEResNet(ODEBlock)
net.apply(conv_init)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)


def train(epoch):
    net.train()
    train_loss, correct, total = 0, 0, 0
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr_schedule(args.lr, epoch)
    for idx, (inputs, labels) in enumerate(train_loader):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()  # raises
        optimizer.step()
        train_loss += loss.item()
        correct, total = correct + outputs.argmax(1).eq(labels).sum().item(), total + labels.size(0)
    print('Epoch %d  loss %.4f  acc %.3f  nfe %d' % (epoch, train_loss / len(train_loader), correct / total, net.ode.nfe))


def test(epoch):
    net.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for inputs, labels in test_loader:
            correct += net(inputs).argmax(1).eq(labels).sum().item()
            total += labels.size(0)
    print('Test epoch %d  acc %.3f' % (epoch, correct / total))
    return correct / total


for epoch in range(args.num_epochs):
    train(epoch)
    test(epoch)
