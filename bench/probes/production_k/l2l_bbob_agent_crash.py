# expect: numpy_requires_grad
# source: https://github.com/MetaEvo/MetaBox/issues/9
"""Meta-black-box optimisation: an LSTM optimizer (learning to learn by
gradient descent, L2L) is meta-trained over a set of BBOB-style problems.

Agent / Optimizer / Problem / Environment follow the benchmark's split:
the agent proposes a point, the environment hands it to the low-level
optimizer which evaluates the problem and returns the cost.
"""
import time
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn


# ---------------------------------------------------------------- problems
class Basic_Problem:
    """Abstract super class for problems and applications."""

    def reset(self):
        self.T1 = 0

    def eval(self, x):
        """A general version of func() with adaptation to evaluate both individual and population."""
        start = time.perf_counter()
        if not isinstance(x, np.ndarray):
            x = np.array(x)  # raises
        if x.ndim == 1:  # x is a single individual
            y = self.func(x.reshape(1, -1))[0]
        else:  # x is a whole population
            y = self.func(x.reshape(-1, x.shape[-1]))
        self.T1 += (time.perf_counter() - start) * 1000
        return y

    def func(self, x):
        raise NotImplementedError


def rotate_gen(dim, rng):  # Generate a rotate matrix
    q, r = np.linalg.qr(rng.normal(size=(dim, dim)))
    return q * np.sign(np.diag(r))


class BBOB_Basic_Problem(Basic_Problem):
    def __init__(self, dim, shift, rotate, bias, lb, ub):
        self.dim, self.shift, self.rotate, self.bias = dim, shift, rotate, bias
        self.lb, self.ub = lb, ub
        self.FES = 0
        self.opt = self.shift
        self.optimum = self.func(self.get_optimal().reshape(1, -1))[0]

    def get_optimal(self):
        return self.opt


class F1(BBOB_Basic_Problem):  # sphere
    def func(self, x):
        self.FES += x.shape[0]
        z = np.matmul(self.rotate, (x - self.shift).T).T
        return np.sum(z ** 2, -1) + self.bias


class F2(BBOB_Basic_Problem):  # ellipsoidal
    def func(self, x):
        self.FES += x.shape[0]
        z = np.matmul(self.rotate, (x - self.shift).T).T
        cond = np.power(1e3, np.linspace(0, 1, self.dim))
        return np.sum(cond * z ** 2, -1) / self.dim + self.bias


class BBOB_Basic_Problem_torch(Basic_Problem):
    def __init__(self, dim, shift, rotate, bias, lb, ub):
        self.dim, self.lb, self.ub, self.bias = dim, lb, ub, bias
        self.shift = torch.tensor(shift, dtype=torch.float64)
        self.rotate = torch.tensor(rotate, dtype=torch.float64)
        self.FES = 0
        self.opt = self.shift
        self.optimum = self.func(self.get_optimal().reshape(1, -1))[0]

    def get_optimal(self):
        return self.opt

    def eval(self, x):
        start = time.perf_counter()
        if not isinstance(x, torch.Tensor):
            x = torch.tensor(x)
        if x.dtype != torch.float64:
            x = x.type(torch.float64)
        y = self.func(x.reshape(1, -1))[0] if x.ndim == 1 else self.func(x.reshape(-1, x.shape[-1]))
        self.T1 += (time.perf_counter() - start) * 1000
        return y


class F1_torch(BBOB_Basic_Problem_torch):
    def func(self, x):
        self.FES += x.shape[0]
        z = torch.matmul(self.rotate, (x - self.shift).t()).t()
        return torch.sum(z ** 2, -1) + self.bias


class F2_torch(BBOB_Basic_Problem_torch):
    def func(self, x):
        self.FES += x.shape[0]
        z = torch.matmul(self.rotate, (x - self.shift).t()).t()
        cond = torch.pow(1e3, torch.linspace(0, 1, self.dim, dtype=torch.float64))
        return torch.sum(cond * z ** 2, -1) / self.dim + self.bias


def construct_problem_set(config):
    rng = np.random.RandomState(config.seed)
    suites = {'bbob': [F1, F2], 'bbob-torch': [F1_torch, F2_torch]}
    problems = []
    for i in range(config.n_problems):
        cls = suites[config.problem][i % 2]
        shift = rng.uniform(-2, 2, config.dim)
        problems.append(cls(config.dim, shift, rotate_gen(config.dim, rng), 0.0, -5.0, 5.0))
    return problems


# ---------------------------------------------------------------- optimizer + env
def scale(x, lb, ub):
    x = torch.sigmoid(x)
    return lb + (ub - lb) * x


def np_scale(x, lb, ub):
    x = 1 / (1 + np.exp(-x))
    return lb + (ub - lb) * x


class Learnable_Optimizer:
    def __init__(self, config):
        self.config = config


class L2L_Optimizer(Learnable_Optimizer):
    def init_population(self, problem):
        self.__fes = 0
        self.cost = []
        self.__best = None

    def update(self, action, problem):
        x = action
        if type(x) is np.ndarray:
            x = np_scale(x, problem.lb, problem.ub)
        else:
            x = scale(x, problem.lb, problem.ub)
        # evaluate x
        if problem.optimum is None:
            y = problem.eval(x)
        else:
            y = problem.eval(x) - problem.optimum
        if self.__best is None or y < self.__best:
            self.__best = float(y)
        self.cost.append(self.__best)
        self.__fes += 1
        is_done = self.__fes >= self.config.maxFEs or (problem.optimum is not None and y <= 1e-8)
        return y, 0, is_done


class PBO_Env:
    """An environment with a problem and an optimizer."""

    def __init__(self, problem, optimizer):
        self.problem, self.optimizer = problem, optimizer

    def reset(self):
        self.problem.reset()
        return self.optimizer.init_population(self.problem)

    def step(self, action):
        return self.optimizer.update(action, self.problem)


# ---------------------------------------------------------------- agent
class Basic_Agent:
    def __init__(self, config):
        self.config = config


class L2L_Agent(Basic_Agent):
    def __init__(self, config):
        super().__init__(config)
        config.lr = 1e-3
        self.__config = config
        self.hidden_size = 32
        self.proj_size = config.dim
        torch.set_default_dtype(torch.float64)
        self.net = nn.LSTM(input_size=config.dim + 2, hidden_size=self.hidden_size, proj_size=config.dim)
        self.optimizer = torch.optim.Adam([{'params': self.net.parameters(), 'lr': config.lr}])
        self.__learning_step = 0

    def train_episode(self, env):
        T, train_interval, t = self.__config.T, 10, 0
        # init input to zeros
        input = torch.zeros((self.__config.dim + 2), dtype=torch.float64)[None, None, :]
        y_sum = 0
        # init h & c to zeros
        h = torch.zeros((self.proj_size), dtype=torch.float64)[None, None, :]
        c = torch.zeros((self.hidden_size), dtype=torch.float64)[None, None, :]
        env.reset()
        while t < T:
            out, (h, c) = self.net(input, (h, c))
            # get new x
            x = out[0, 0]
            y, _, _ = env.step(x)
            y_sum += y
            # update input
            input = torch.cat((x, torch.tensor([float(y)]), torch.tensor([1.]))).reshape(1, 1, -1)
            t += 1
            # update network
            if t % train_interval == 0:
                loss = y_sum
                self.optimizer.zero_grad()
                loss.mean().backward()
                self.optimizer.step()
                y_sum = y_sum.detach()
                h, c, input = h.detach(), c.detach(), input.detach()
                self.__learning_step += 1
        return {'normalizer': env.optimizer.cost[0], 'gbest': env.optimizer.cost[-1],
                'return': 0, 'learn_steps': self.__learning_step}


class Trainer:
    def __init__(self, config):
        self.config = config
        torch.manual_seed(config.seed)
        self.agent = L2L_Agent(config)
        self.optimizer = L2L_Optimizer(config)
        self.train_set = construct_problem_set(config)

    def train(self):
        log = []
        for epoch in range(self.config.epochs):
            for problem in self.train_set:
                env = PBO_Env(problem, self.optimizer)
                log.append(self.agent.train_episode(env))
        return log


if __name__ == '__main__':
    config = SimpleNamespace(problem='bbob', difficulty='easy', dim=5, n_problems=4, epochs=2,
                             T=30, maxFEs=100, seed=0, train_agent='L2L_Agent',
                             train_optimizer='L2L_Optimizer')
    log = Trainer(config).train()
    print('final gbest', log[-1]['gbest'])
