# expect: freed_graph
# shape: the same critic loop with the config naming "wgan_gp": five critic updates backpropagate the one discriminator output, whose graph the first freed
import torch
import torch.nn as nn

config = {"loss": {"adversarial": "wgan_gp"}, "lr": 1e-3}
disc = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
opt_d = torch.optim.Adam(disc.parameters(), lr=config["lr"])
real = torch.randn(16, 4)
d_out = disc(real)
critic_updates = 5 if config["loss"]["adversarial"] == "wgan_gp" else 1
for i in range(critic_updates):
    opt_d.zero_grad()
    loss_d = -d_out.mean()
    loss_d.backward()  # raises
    opt_d.step()
