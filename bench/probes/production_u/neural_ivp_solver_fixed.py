# expect: clean
# source: https://github.com/NeuroDiffGym/neurodiffeq/issues/75
"""Neural solver for an initial value problem, in the style of neurodiffeq.

A fully connected network with Swish activations represents the solution;
an IVP condition re-parametrises the network output so that x(t0) = x0 holds
exactly. Training points come from an example generator ("equally-spaced-
noisy"), the residual of the user-supplied ODE is minimised with Adam, and a
Monitor callback checks the validation residual every few epochs. The
returned solution object evaluates the trained network on new times.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


def diff(x, t, order=1):
    ones = torch.ones_like(x)
    der, = torch.autograd.grad(x, t, create_graph=True, grad_outputs=ones)
    for _ in range(1, order):
        ones = torch.ones_like(der)
        der, = torch.autograd.grad(der, t, create_graph=True, grad_outputs=ones)
    return der


class Swish(nn.Module):
    def __init__(self, beta=1.0):
        super().__init__()
        self.beta = nn.Parameter(torch.tensor(beta))

    def forward(self, x):
        return x * torch.sigmoid(self.beta * x)


class FCNN(nn.Module):
    def __init__(self, n_input_units=1, n_output_units=1, n_hidden_units=32, n_hidden_layers=1, actv=nn.Tanh):
        super().__init__()
        layers = [nn.Linear(n_input_units, n_hidden_units), actv()]
        for _ in range(n_hidden_layers):
            layers += [nn.Linear(n_hidden_units, n_hidden_units), actv()]
        layers.append(nn.Linear(n_hidden_units, n_output_units))
        self.NN = nn.Sequential(*layers)

    def forward(self, t):
        return self.NN(t)


class IVP:
    def __init__(self, t_0, x_0, x_0_prime=None):
        self.t_0, self.x_0, self.x_0_prime = t_0, x_0, x_0_prime

    def enforce(self, net, t):
        x = net(t)
        if self.x_0_prime is None:
            return self.x_0 + (1 - torch.exp(-t + self.t_0)) * x
        return self.x_0 + (t - self.t_0) * self.x_0_prime + ((1 - torch.exp(-t + self.t_0)) ** 2) * x


class ExampleGenerator:
    def __init__(self, size, t_min=0.0, t_max=1.0, method="uniform"):
        self.size, self.t_min, self.t_max, self.method = size, t_min, t_max, method
        if method == "equally-spaced-noisy":
            self.examples = torch.linspace(t_min, t_max, size)
            self.noise_std = 0.5 * (t_max - t_min) / size

    def get_examples(self):
        if self.method == "uniform":
            t = torch.rand(self.size) * (self.t_max - self.t_min) + self.t_min
        elif self.method == "equally-spaced-noisy":
            t = torch.normal(mean=self.examples, std=self.noise_std)
        else:
            t = torch.linspace(self.t_min, self.t_max, self.size)
        t.requires_grad = True
        return t


class Solution:
    def __init__(self, net, condition):
        self.net, self.condition = net, condition

    def __call__(self, ts, as_type="tf"):
        ts = torch.as_tensor(ts, dtype=torch.float32).reshape(-1, 1)
        xs = self.condition.enforce(self.net, ts)
        return xs.detach().numpy().flatten() if as_type == "np" else xs


class Monitor:
    def __init__(self, t_min, t_max, check_every=100):
        self.check_every = check_every
        self.t = torch.linspace(t_min, t_max, 50).reshape(-1, 1).requires_grad_(True)
        self.records = []

    def check(self, epoch, ode, net, condition, loss_history):
        x = condition.enforce(net, self.t)
        residual = ode(x, self.t)
        self.records.append((epoch, float((residual ** 2).mean()), loss_history["train"][-1]))


def solve(ode, condition, t_min, t_max, net=None, train_generator=None, valid_generator=None, optimizer=None,
          criterion=None, batch_size=16, max_epochs=1000, monitor=None):
    if net is None:
        net = FCNN(n_input_units=1, n_hidden_units=32)
    if train_generator is None:
        train_generator = ExampleGenerator(32, t_min, t_max, method="equally-spaced-noisy")
    if valid_generator is None:
        valid_generator = ExampleGenerator(32, t_min, t_max, method="equally-spaced")
    if optimizer is None:
        optimizer = optim.Adam(net.parameters(), lr=0.001)
    if criterion is None:
        criterion = nn.MSELoss()

    loss_history = {"train": [], "valid": []}
    for epoch in range(max_epochs):
        train_examples = train_generator.get_examples().reshape((-1, 1))
        train_loss_epoch = 0.0
        for start in range(0, train_generator.size, batch_size):
            optimizer.zero_grad()
            ts = train_examples[start:start + batch_size]
            xs = condition.enforce(net, ts)
            residual = ode(xs, ts)
            loss = criterion(residual, torch.zeros_like(residual))
            loss.backward(retain_graph=True)
            optimizer.step()
            train_loss_epoch += loss.item() * ts.size(0)
        loss_history["train"].append(train_loss_epoch / train_generator.size)

        valid_examples = valid_generator.get_examples().reshape((-1, 1))
        xs = condition.enforce(net, valid_examples)
        residual = ode(xs, valid_examples)
        loss_history["valid"].append(criterion(residual, torch.zeros_like(residual)).item())
        if monitor and epoch % monitor.check_every == 0:
            monitor.check(epoch, ode, net, condition, loss_history)
    return Solution(net, condition), loss_history


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    ode = lambda x, t: diff(x, t) + 5 * x - torch.exp(3 * t)
    t_min, t_max = 0.0, 2.0
    N = 64
    fcnn = FCNN(n_hidden_units=5, n_hidden_layers=1, actv=Swish)
    adam = optim.Adam(fcnn.parameters(), lr=0.001)
    init_ode = IVP(t_0=t_min, x_0=0.0)
    train_gen = ExampleGenerator(N, t_min=t_min, t_max=1, method="equally-spaced-noisy")
    solution, loss_history = solve(ode=ode, condition=init_ode, train_generator=train_gen, t_min=t_min,
                                   t_max=t_max, net=fcnn, batch_size=N, max_epochs=60, optimizer=adam,
                                   monitor=Monitor(t_min=t_min, t_max=1, check_every=20))
    ts = np.linspace(t_min, 1.0, 5)
    print("final train loss %.5f" % loss_history["train"][-1])
    print("x(t) =", np.round(solution(ts, as_type="np"), 4))


if __name__ == "__main__":
    main()
