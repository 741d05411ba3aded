# expect: clean
# source: https://github.com/jingyaogong/minimind/issues/754
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, HID = 32, 48


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, HID)
        self.rnn = nn.GRU(HID, HID, batch_first=True)
        self.out = nn.Linear(HID, VOCAB)

    def forward(self, ids):
        h = self.emb(ids)
        h, _ = self.rnn(h)
        return self.out(h)


@torch.inference_mode()
def generate(model, prompt, max_new_tokens=6):
    ids = prompt
    for _ in range(max_new_tokens):
        logits = model(ids)[:, -1, :]
        nxt = torch.multinomial(F.softmax(logits, dim=-1), 1)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


def reward_fn(completions):
    return (completions % 2 == 0).float().mean(dim=1)


model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
num_generations, prompt_len = 4, 5

for step in range(3):
    prompts = torch.randint(0, VOCAB, (2, prompt_len)).repeat_interleave(num_generations, dim=0)
    outputs = generate(model, prompts).detach().clone()
    completion = outputs[:, prompt_len:]
    rewards = reward_fn(completion).view(-1, num_generations)
    advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).view(-1)

    model.train()
    res = model(outputs)
    logps = F.log_softmax(res[:, :-1, :], dim=-1).gather(2, outputs[:, 1:].unsqueeze(-1)).squeeze(-1)
    per_token_logps = logps[:, prompt_len - 1:]
    ratio = torch.exp(per_token_logps - per_token_logps.detach())
    loss = -(ratio * advantages.unsqueeze(1)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: reward {rewards.mean().item():.3f} loss {loss.item():.4f}")
