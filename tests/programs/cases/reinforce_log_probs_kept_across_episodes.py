# expect: freed_graph
# shape: REINFORCE: the log-probs list is never emptied, so the second episode's loss reaches the first episode's freed graph
import torch
import torch.nn as nn

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
log_probs = []
for episode in range(3):
    obs = torch.randn(5, 4)
    dist = torch.distributions.Categorical(logits=policy(obs))
    actions = dist.sample()
    log_probs.append(dist.log_prob(actions))
    returns = torch.randn(5)
    loss = -(torch.cat(log_probs) * returns.repeat(len(log_probs))).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
