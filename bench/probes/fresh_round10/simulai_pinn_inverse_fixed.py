# expect: clean
# source: https://github.com/IBM/simulai/pull/182
"""simulai-style physics-informed inverse problem: a dense network u(t) is fitted
to sparse noisy observations of a damped oscillator while the residual of
u'' + 2*zeta*omega*u' + omega^2*u = 0 is enforced on collocation points; the
damping ratio and natural frequency are learned jointly with the network
weights. Models are wrapped to the configured device and float64 precision."""
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)

CONFIG = {"device": "cpu", "precision": "float64", "layers_units": [32, 32, 32],
          "activation": "tanh", "n_epochs": 60, "lr": 5e-3, "n_colloc": 64, "n_obs": 16,
          "weights": {"residual": 1.0, "data": 10.0, "initial": 1.0},
          "physics_init": {"omega": 1.5, "zeta": 0.05}}


class NetworkTemplate(nn.Module):
    def __init__(self, device="cpu", precision="float32"):
        super().__init__()
        self.device = device
        self.dtype = getattr(torch, precision)

    def to_wrap(self, entity, device="cpu"):
        return entity.to(device=device, dtype=self.dtype)


class DenseNetwork(NetworkTemplate):
    def __init__(self, input_size, output_size, layers_units, activation="tanh", **kwargs):
        super().__init__(**kwargs)
        sizes = [input_size] + list(layers_units)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.output = nn.Linear(sizes[-1], output_size)
        self.activation = getattr(torch, activation)
        self.to(device=self.device, dtype=self.dtype)

    def forward(self, input_data):
        h = input_data
        for layer in self.hidden:
            h = self.activation(layer(h))
        return self.output(h)


class PhysicsParameters(NetworkTemplate):
    """Holds the trainable coefficients of the governing equation."""
    def __init__(self, initial_values, **kwargs):
        super().__init__(**kwargs)
        self.values = {}
        for name, value in initial_values.items():
            coeff = self.to_wrap(torch.tensor([value]), device=self.device)
            self.values[name] = coeff.requires_grad_(True)

    def parameters_list(self):
        return list(self.values.values())

    def __getitem__(self, item):
        return self.values[item]


class OscillatorResidual:
    def __init__(self, net, physics):
        self.net, self.physics = net, physics

    def gradient(self, u, t):
        return torch.autograd.grad(u, t, grad_outputs=torch.ones_like(u), create_graph=True)[0]

    def __call__(self, t):
        t = t.clone().requires_grad_(True)
        u = self.net(t)
        u_t = self.gradient(u, t)
        u_tt = self.gradient(u_t, t)
        omega, zeta = self.physics["omega"], self.physics["zeta"]
        return u_tt + 2 * zeta * omega * u_t + omega ** 2 * u


class Optimizer:
    def __init__(self, name, params, lr):
        self.optimizer = getattr(torch.optim, name)(params, lr=lr)

    def fit(self, loss_fn, n_epochs, callback=None):
        for epoch in range(n_epochs):
            self.optimizer.zero_grad()
            total, terms = loss_fn()
            total.backward()
            self.optimizer.step()
            if callback is not None:
                callback(epoch, total, terms)


def exact_solution(t, omega=2.0, zeta=0.1):
    wd = omega * np.sqrt(1 - zeta ** 2)
    return np.exp(-zeta * omega * t) * np.cos(wd * t)


def build_data(cfg, dtype):
    t_obs = np.sort(np.random.uniform(0, 6, cfg["n_obs"]))[:, None]
    u_obs = exact_solution(t_obs) + 0.01 * np.random.randn(*t_obs.shape)
    t_col = np.linspace(0, 6, cfg["n_colloc"])[:, None]
    to_t = lambda a: torch.from_numpy(a).to(dtype)
    return to_t(t_obs), to_t(u_obs), to_t(t_col)


def main(cfg=CONFIG):
    net = DenseNetwork(1, 1, cfg["layers_units"], cfg["activation"],
                       device=cfg["device"], precision=cfg["precision"])
    physics = PhysicsParameters(cfg["physics_init"], device=cfg["device"], precision=cfg["precision"])
    residual = OscillatorResidual(net, physics)
    t_obs, u_obs, t_col = build_data(cfg, net.dtype)
    t0 = torch.zeros(1, 1, dtype=net.dtype)
    w = cfg["weights"]

    def loss_fn():
        r = residual(t_col)
        terms = {"residual": (r ** 2).mean(),
                 "data": ((net(t_obs) - u_obs) ** 2).mean(),
                 "initial": ((net(t0) - 1.0) ** 2).mean()}
        return sum(w[k] * v for k, v in terms.items()), terms

    def log(epoch, total, terms):
        if epoch % 20 == 0 or epoch == cfg["n_epochs"] - 1:
            print("epoch %4d  loss %.5f  omega %.3f  zeta %.3f" % (
                epoch, total.item(), physics["omega"].item(), physics["zeta"].item()))

    params = list(net.parameters()) + physics.parameters_list()
    optimizer = Optimizer("Adam", params=params, lr=cfg["lr"])
    optimizer.fit(loss_fn, cfg["n_epochs"], callback=log)


if __name__ == "__main__":
    main()
