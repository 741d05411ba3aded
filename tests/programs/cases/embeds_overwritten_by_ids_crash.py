# expect: grad_unused
# shape: an adversarial-noise loss differentiates a perturbation of the input embeddings, but the model's forward re-embeds the token ids whenever they are given, so the perturbed embeddings never reach the loss
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, vocab=50, hidden=16, classes=3, max_len=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(torch.randn(1, max_len, hidden) * 0.02)
        self.head = nn.Linear(hidden, classes)

    def forward(self, input_ids=None, inputs_embeds=None):
        if input_ids is not None:
            inputs_embeds = self.embed(input_ids)
        h = inputs_embeds + self.pos[:, : inputs_embeds.size(1)]
        return self.head(h.mean(1))


def adversarial_loss(model, ids, embeds, logits):
    noise = torch.randn_like(embeds) * 1e-5
    noise.requires_grad_()
    adv_logits = model(input_ids=ids, inputs_embeds=embeds + noise)
    kl = F.kl_div(F.log_softmax(adv_logits, -1), F.softmax(logits.detach(), -1), reduction="batchmean")
    (g,) = torch.autograd.grad(kl, noise, retain_graph=True)  # raises
    return kl + g.norm()


model = Classifier()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ids = torch.randint(0, 50, (4, 8))
labels = torch.randint(0, 3, (4,))
embeds = model.embed(ids)
logits = model(inputs_embeds=embeds)
loss = F.cross_entropy(logits, labels) + adversarial_loss(model, ids, embeds, logits)
opt.zero_grad()
loss.backward()
opt.step()
