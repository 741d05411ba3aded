# expect: freed_graph
# shape: `compile()` defines a loss function and a `train_step` whose optimizer closure (a function inside a function inside a method) calls it; the loss reads latent codes computed once with the encoder's graph, freed by the first step
import torch
import torch.nn as nn


class Model:
    def __init__(self, net, latent):
        self.net = net
        self.latent = latent

    def compile(self, lr):
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)

        def losses_train(inputs):
            return ((self.net(inputs) - self.latent) ** 2).mean()

        def train_step(inputs):
            def closure():
                loss = losses_train(inputs)
                self.opt.zero_grad()
                loss.backward()  # raises
                return loss

            return self.opt.step(closure)

        self.train_step = train_step

    def train(self, x, iterations):
        for _ in range(iterations):
            self.train_step(x)


torch.manual_seed(0)
encoder = nn.Linear(6, 3)
x = torch.randn(16, 6)
model = Model(nn.Linear(6, 3), encoder(x))
model.compile(1e-3)
model.train(x, iterations=3)
