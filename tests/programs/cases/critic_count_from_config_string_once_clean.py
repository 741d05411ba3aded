# expect: clean
# shape: the number of critic updates is 5 only when the config's adversarial loss is "wgan_gp" (a string compared with a string); with "gan" the critic loop backpropagates the discriminator's output once
import torch
import torch.nn as nn

config = {"loss": {"adversarial": "gan"}, "lr": 1e-3}
disc = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
opt_d = torch.optim.Adam(disc.parameters(), lr=config["lr"])
real = torch.randn(16, 4)
d_out = disc(real)
critic_updates = 5 if config["loss"]["adversarial"] == "wgan_gp" else 1
for i in range(critic_updates):
    opt_d.zero_grad()
    loss_d = -d_out.mean()
    loss_d.backward()
    opt_d.step()
