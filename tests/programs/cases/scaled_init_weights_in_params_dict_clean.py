# expect: clean
# shape: each weight is scaled first and made to require grad last, so the dict holds leaves
import torch


def init_params(n_in, n_hid, sigma):
    W1 = (torch.randn(n_in, n_hid) * sigma).requires_grad_()
    b1 = torch.zeros(n_hid, requires_grad=True)
    W2 = (torch.randn(n_hid, 1) * sigma).requires_grad_()
    b2 = torch.zeros(1, requires_grad=True)
    return {"W1": W1, "b1": b1, "W2": W2, "b2": b2}


class Trainer:
    def __init__(self, n_in, n_hid):
        self.params = init_params(n_in, n_hid, 0.01)
        groups = [self.params["W1"], self.params["b1"], self.params["W2"], self.params["b2"]]
        self.opt = torch.optim.SGD(groups, lr=0.1)

    def net(self, x):
        h = torch.relu(x @ self.params["W1"] + self.params["b1"])
        return h @ self.params["W2"] + self.params["b2"]

    def fit(self, x, y, epochs=3):
        for _ in range(epochs):
            loss = ((self.net(x) - y) ** 2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


tr = Trainer(5, 8)
tr.fit(torch.randn(16, 5), torch.randn(16, 1))
