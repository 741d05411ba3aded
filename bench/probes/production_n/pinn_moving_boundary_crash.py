# expect: requires_grad_nonleaf
# source: https://github.com/erfanhamdi/pinn-torch/issues/1
"""Physics-informed network for the nonlinear Schrodinger equation on a shrinking domain.

Adapted from pinn-torch's Schrodingers_Equation/main.py: h = u + iv solves
    i h_t + 0.5 h_xx + |h|^2 h = 0,   x in [x_l(t), 5],  t in [0, pi/2],
with h(x, 0) = 2 sech(x) and the periodic Dirichlet/Neumann coupling between the two
ends, except that the lower end now moves: x_l(t) = 2 pi exp(-t) - 2 pi - 5.
Collocation points by Latin hypercube sampling, training with L-BFGS and a closure.
The initial data are generated analytically instead of being read from NLS.mat.
"""
from functools import partial

import numpy as np
import torch
import torch.nn as nn

iter = 0


def set_seed(seed: int = 42):
    '''
    Seeding the random variables for reproducibility
    '''
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def lhs(n, samples):
    """Latin hypercube sampling in [0, 1]^n (stand-in for pyDOE.lhs)."""
    cut = np.linspace(0, 1, samples + 1)
    u = np.random.rand(samples, n)
    points = cut[:samples, None] + u * (cut[1:, None] - cut[:samples, None])
    for j in range(n):
        points[:, j] = points[np.random.permutation(samples), j]
    return points


class SchrodingerNN(nn.Module):
    def __init__(self, width=40, depth=3):
        super(SchrodingerNN, self).__init__()
        self.linear_in = nn.Linear(2, width)
        self.linear_out = nn.Linear(width, 2)
        self.layers = nn.ModuleList([nn.Linear(width, width) for i in range(depth)])
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear_in(x)
        for layer in self.layers:
            x = self.act(layer(x))
        return self.linear_out(x)


def derivative(dy: torch.Tensor, x: torch.Tensor, order: int = 1) -> torch.Tensor:
    """
    This function calculates the derivative of the model at x_f
    """
    for i in range(order):
        dy = torch.autograd.grad(dy, x, grad_outputs=torch.ones_like(dy), create_graph=True, retain_graph=True)[0]
    return dy


def f(model, x_f, t_f):
    """
    This function evaluates the PDE at collocation points.
    """
    h = model(torch.stack((x_f, t_f), axis=1))
    u, v = h[:, 0], h[:, 1]
    u_t = derivative(u, t_f, order=1)
    v_t = derivative(v, t_f, order=1)
    u_xx = derivative(u, x_f, order=2)
    v_xx = derivative(v, x_f, order=2)
    f_u = u_t + 0.5 * v_xx + (u ** 2 + v ** 2) * v
    f_v = v_t - 0.5 * u_xx - (u ** 2 + v ** 2) * u
    return f_u, f_v


def mse_f(model, x_f, t_f):
    """
    This function calculates the MSE for the PDE.
    """
    f_u, f_v = f(model, x_f, t_f)
    return (f_u ** 2 + f_v ** 2).mean()


def mse_0(model, x_0, u_0, v_0):
    """
    This function calculates the MSE for the initial condition.
    """
    t_0 = torch.zeros_like(x_0)
    h = model(torch.stack((x_0, t_0), axis=1))
    h_u, h_v = h[:, 0], h[:, 1]
    return ((h_u - u_0) ** 2 + (h_v - v_0) ** 2).mean()


def mse_b(model, t_b):
    """
    This function calculates the MSE for the boundary condition.
    """
    # the lower boundary moves with time: x_l(t) = 2 pi exp(-t) - 2 pi - 5
    x_b_lower = 2 * np.pi * torch.exp(-t_b) - 2 * np.pi - 5  # as in the equation
    x_b_lower.requires_grad = True  # raises
    h_b_left = model(torch.stack((x_b_lower, t_b), axis=1))
    h_u_b_left, h_v_b_left = h_b_left[:, 0], h_b_left[:, 1]
    h_u_b_left_x = derivative(h_u_b_left, x_b_lower, 1)
    h_v_b_left_x = derivative(h_v_b_left, x_b_lower, 1)

    # x_b is the boundary points on +5
    x_b_right = torch.zeros_like(t_b) + 5
    x_b_right.requires_grad = True
    h_b_right = model(torch.stack((x_b_right, t_b), axis=1))
    h_u_b_right, h_v_b_right = h_b_right[:, 0], h_b_right[:, 1]
    h_u_b_right_x = derivative(h_u_b_right, x_b_right, 1)
    h_v_b_right_x = derivative(h_v_b_right, x_b_right, 1)

    mse_drichlet = (h_u_b_left - h_u_b_right) ** 2 + (h_v_b_left - h_v_b_right) ** 2
    mse_newman = (h_u_b_left_x - h_u_b_right_x) ** 2 + (h_v_b_left_x - h_v_b_right_x) ** 2
    return (mse_drichlet + mse_newman).mean()


def init_weights(m):
    """
    This function initializes the weights of the model by the normal Xavier initialization method.
    """
    if type(m) == nn.Linear:
        torch.nn.init.xavier_normal_(m.weight)
        m.bias.data.fill_(0.01)


def closure(model, optimizer, x_f, t_f, x_0, u_0, v_0, h_0, t):
    """
    The closure function to use L-BFGS optimization method.
    """
    optimizer.zero_grad()
    loss = mse_f(model, x_f, t_f) + mse_0(model, x_0, u_0, v_0) + mse_b(model, t)
    loss.backward(retain_graph=True)
    global iter
    iter += 1
    print(f" iteration: {iter}  loss: {loss.item()}")
    return loss


def train(model, x_f, t_f, x_0, u_0, v_0, h_0, t, max_iter=6):
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=max_iter, max_eval=max_iter + 2,
                                  history_size=50, tolerance_grad=1e-05,
                                  tolerance_change=0.5 * np.finfo(float).eps, line_search_fn="strong_wolfe")
    # the optimizer.step requires the closure function to be a callable function without inputs
    closure_fn = partial(closure, model, optimizer, x_f, t_f, x_0, u_0, v_0, h_0, t)
    optimizer.step(closure_fn)


def evaluate(model, x_0, u_0, v_0):
    with torch.no_grad():
        h = model(torch.stack((x_0, torch.zeros_like(x_0)), axis=1))
        err = torch.sqrt((h[:, 0] - u_0) ** 2 + (h[:, 1] - v_0) ** 2).mean().item()
    print(f"mean |h - h_0| at t = 0: {err:.4f}")


if __name__ == "__main__":
    set_seed(42)
    # Upper and lower bounds of the spatial and temporal domains
    lb = np.array([-5.0, 0.0])
    ub = np.array([5.0, np.pi / 2])
    N0, N_b, N_f = 50, 50, 600  # initial, boundary and collocation points

    # training points on the initial line and on the time axis (NLS.mat grid)
    x_grid = np.linspace(-5.0, 5.0, 256, endpoint=False)[:, None]
    tt = np.linspace(0.0, np.pi / 2, 201)[:, None]
    x_0 = torch.from_numpy(x_grid.astype(np.float32))
    x_0.requires_grad = True
    x_0 = x_0.flatten().T
    t = torch.from_numpy(tt.astype(np.float32))
    t.requires_grad = True
    t = t.flatten().T
    h_init = 2.0 / np.cosh(x_grid[:, 0])  # h(x, 0) = 2 sech(x)
    u_0 = torch.from_numpy(h_init.astype(np.float32))
    v_0 = torch.zeros_like(u_0)
    h_0 = torch.stack((u_0, v_0), axis=1)

    # collocation data points using latin hypercube sampling method
    c_f = lb + (ub - lb) * lhs(2, N_f)
    x_f = torch.from_numpy(c_f[:, 0].astype(np.float32))
    x_f.requires_grad = True
    t_f = torch.from_numpy(c_f[:, 1].astype(np.float32))
    t_f.requires_grad = True

    idx_0 = np.random.choice(x_0.shape[0], N0, replace=False)
    x_0, u_0, v_0, h_0 = x_0[idx_0], u_0[idx_0], v_0[idx_0], h_0[idx_0]
    idx_b = np.random.choice(t.shape[0], N_b, replace=False)
    t_b = t[idx_b]

    model = SchrodingerNN()
    model.apply(init_weights)
    model.train()
    train(model, x_f, t_f, x_0, u_0, v_0, h_0, t_b)
    evaluate(model, x_0, u_0, v_0)
