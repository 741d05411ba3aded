# expect: nonscalar_backward
# source: https://github.com/pietz/simclr/issues/1
"""SimCLR notebook-style training: two random augmentations of each image go
through a small CNN encoder + projection head and the NT-Xent contrastive loss
is computed from the cosine-similarity matrix of the 2N projections."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
tau = 0.5


def augment(x):
    x = x + 0.1 * torch.randn_like(x)
    if torch.rand(1).item() > 0.5:
        x = torch.flip(x, dims=[3])
    return x


def loss_function(a, b):
    a_norm = torch.norm(a, dim=1).reshape(-1, 1)
    a_cap = torch.div(a, a_norm)
    b_norm = torch.norm(b, dim=1).reshape(-1, 1)
    b_cap = torch.div(b, b_norm)
    a_cap_b_cap = torch.cat([a_cap, b_cap], dim=0)
    a_cap_b_cap_transpose = torch.t(a_cap_b_cap)
    b_cap_a_cap = torch.cat([b_cap, a_cap], dim=0)
    sim = torch.mm(a_cap_b_cap, a_cap_b_cap_transpose)
    sim_by_tau = torch.div(sim, tau)
    exp_sim_by_tau = torch.exp(sim_by_tau)
    sum_of_rows = torch.sum(exp_sim_by_tau, dim=1)
    exp_sim_by_tau_diag = torch.diag(exp_sim_by_tau)
    numerators = torch.exp(torch.div(torch.nn.CosineSimilarity()(a_cap_b_cap, b_cap_a_cap), tau))
    denominators = sum_of_rows - exp_sim_by_tau_diag
    num_by_den = torch.div(numerators, denominators)
    neglog_num_by_den = -torch.log(num_by_den)
    return neglog_num_by_den


encoder = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
projection = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
optimizer = torch.optim.Adam(list(encoder.parameters()) + list(projection.parameters()), lr=1e-3)

images = torch.rand(64, 3, 16, 16)
losses = []
for epoch in range(2):
    for i in range(0, 64, 16):
        x = images[i:i + 16]
        optimizer.zero_grad()
        z_i = projection(encoder(augment(x)))
        z_j = projection(encoder(augment(x)))
        loss = loss_function(z_i, z_j)
        loss.backward()  # raises
        optimizer.step()
        losses.append(float(loss.detach().mean()))
    print(f"epoch {epoch}: loss {sum(losses[-4:]) / 4:.4f}")
