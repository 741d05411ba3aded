# expect: freed_graph
# shape: an encoder looked up in a dict (a registry) and called once before the loop; its feature reused every step
import torch
import torch.nn as nn

torch.manual_seed(0)
ENCODERS = {"mlp": nn.Sequential(nn.Linear(4, 8), nn.Tanh()), "linear": nn.Linear(4, 8)}
encoder = ENCODERS["mlp"]
head = nn.Linear(8, 4)
x = torch.randn(16, 4)
feat = encoder(x)
opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.1)
for step in range(5):
    loss = (head(feat) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
