# expect: inference_tensor
# source: https://github.com/vllm-project/vllm/issues/1968
"""Minimal LLM serving loop (vLLM-like worker): the KV cache is allocated
while profiling memory under torch.inference_mode(), then requests are
decoded step by step, writing each new key/value into the cache slots."""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, MAX_LEN, BLOCKS = 50, 16, 12, 4


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.out = nn.Linear(DIM, VOCAB)

    def forward(self, tok, pos, k_cache, v_cache, slot):
        h = self.emb(tok)                                   # [1, D]
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        k_cache[slot, pos] = k[0]  # raises
        v_cache[slot, pos] = v[0]
        att = (q @ k_cache[slot, :pos + 1].T).softmax(-1)   # [1, pos+1]
        return self.out(att @ v_cache[slot, :pos + 1])


class Worker:
    def __init__(self):
        self.model = TinyLM().eval()

    @torch.inference_mode()
    def profile_and_init_cache(self):
        self.model(torch.tensor([0]), 0, torch.zeros(1, MAX_LEN, DIM), torch.zeros(1, MAX_LEN, DIM), 0)
        self.k_cache = torch.zeros(BLOCKS, MAX_LEN, DIM)
        self.v_cache = torch.zeros(BLOCKS, MAX_LEN, DIM)

    @torch.no_grad()
    def execute_model(self, tok, pos, slot):
        return self.model(tok, pos, self.k_cache, self.v_cache, slot)


worker = Worker()
worker.profile_and_init_cache()
prompt = [3, 7, 11]
tokens = list(prompt)
for pos in range(8):
    logits = worker.execute_model(torch.tensor([tokens[pos]]), pos, slot=0)
    if pos >= len(prompt) - 1:
        tokens.append(int(logits.argmax(-1)))
print("generated:", tokens)
