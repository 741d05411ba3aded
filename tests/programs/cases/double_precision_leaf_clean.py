# expect: clean
# shape: the same model makes its hyperparameters in double precision from the start
import torch

CONFIG = {"dtype": torch.float64, "lr": 0.05, "steps": 3}


class GPHyperparameters:
    def __init__(self, config):
        self.log_lengthscale = torch.zeros(1, dtype=config["dtype"], requires_grad=True)
        self.log_noise = torch.full((1,), -2.0, dtype=config["dtype"], requires_grad=True)
        self.optimizer = torch.optim.Adam([self.log_lengthscale, self.log_noise], lr=config["lr"])

    def nll(self, x, y):
        d = (x[:, None] - x[None, :]) ** 2
        k = torch.exp(-d / (2 * self.log_lengthscale.exp() ** 2)) + self.log_noise.exp() * torch.eye(len(x), dtype=x.dtype)
        return 0.5 * y @ torch.linalg.solve(k, y) + 0.5 * torch.logdet(k)


x = torch.linspace(0, 1, 10, dtype=torch.float64)
y = torch.sin(6 * x)
gp = GPHyperparameters(CONFIG)
for _ in range(CONFIG["steps"]):
    gp.optimizer.zero_grad()
    loss = gp.nll(x, y)
    loss.backward()
    gp.optimizer.step()
