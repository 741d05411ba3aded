# expect: clean
# shape: adversarial noise is found with autograd.grad by the noise only, which runs (and frees) only the part of the graph that leads to it: the embeddings' graph stays for the loss's backward
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, embeds):
        return self.head(embeds.mean(1))


def adversarial_loss(model, embeds, clean_logits, steps=2):
    noise = (torch.randn_like(embeds) * 1e-3).requires_grad_()
    for _ in range(steps):
        loss = F.kl_div(F.log_softmax(model(embeds + noise), -1), F.softmax(clean_logits.detach(), -1),
                        reduction="batchmean")
        grad, = torch.autograd.grad(loss, noise)
        noise = (noise + 1e-2 * grad.sign()).detach().requires_grad_()
    return F.mse_loss(model(embeds + noise), clean_logits.detach())


model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(2):
    ids, labels = torch.randint(0, 20, (4, 6)), torch.randint(0, 3, (4,))
    embeds = model.embed(ids)
    logits = model(embeds)
    loss = F.cross_entropy(logits, labels) + adversarial_loss(model, embeds, logits)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
