# expect: clean
# shape: the twin of latent_passed_on_after_its_encoder_backward_crash.py whose encoder step returns `z.detach()`: the dynamics model trains on the latent as data
import torch
import torch.nn as nn


class WorldModel:
    def __init__(self):
        self.enc = nn.Linear(8, 4)
        self.dec = nn.Linear(4, 8)
        self.rnn = nn.GRU(4, 16, batch_first=True)
        self.head = nn.Linear(16, 4)
        self.vae_opt = torch.optim.Adam(list(self.enc.parameters()) + list(self.dec.parameters()))
        self.rnn_opt = torch.optim.Adam(list(self.rnn.parameters()) + list(self.head.parameters()))

    def vae_step(self, obs):
        z = torch.tanh(self.enc(obs))
        loss = (self.dec(z) - obs).pow(2).mean()
        self.vae_opt.zero_grad()
        loss.backward()
        self.vae_opt.step()
        return z.detach()

    def dynamics_step(self, z):
        out, _ = self.rnn(z[:, :-1])
        loss = (self.head(out) - z[:, 1:]).pow(2).mean()
        self.rnn_opt.zero_grad()
        loss.backward()
        self.rnn_opt.step()


wm = WorldModel()
z = wm.vae_step(torch.randn(2, 6, 8))
wm.dynamics_step(z)
