# expect: clean
# source: https://github.com/TigerResearch/TigerBot/pull/127
"""Chat-style generation with a quantised-model wrapper in the style of
TigerBot's exllamav2_hf_infer.py, streaming tokens produced by a background
generation worker."""
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


class ExBackend(nn.Module):
    """Stand-in for ExLlamaV2 + ExLlamaV2Cache (single attention layer)."""

    @torch.inference_mode()
    def __init__(self, vocab=32, d=16, max_seq_len=64):
        super().__init__()
        self.emb, self.qkv, self.lm_head = nn.Embedding(vocab, d), nn.Linear(d, 3 * d), nn.Linear(d, vocab)
        self.cache_k = torch.zeros(1, max_seq_len, d)
        self.cache_v = torch.zeros(1, max_seq_len, d)
        self.current_seq_len = 0

    def forward(self, ids):
        q, k, v = self.qkv(self.emb(ids)).chunk(3, dim=-1)
        start, end = self.current_seq_len, self.current_seq_len + ids.shape[1]
        self.cache_k[:, start:end] = k
        self.cache_v[:, start:end] = v
        self.current_seq_len = end
        att = torch.softmax(q @ self.cache_k[:, :end].transpose(1, 2), dim=-1)
        return self.lm_head(att @ self.cache_v[:, :end])


class Exllamav2HF:
    def __init__(self):
        self.ex_model = ExBackend()

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens=8, streamer=None):
        self.ex_model.current_seq_len = 0
        logits = self.ex_model(input_ids)
        out = []
        for _ in range(max_new_tokens):
            next_id = logits[:, -1].argmax(-1, keepdim=True)
            out.append(int(next_id))
            if streamer is not None:
                streamer.append(int(next_id))
            logits = self.ex_model(next_id)
        return out


def generate_stream(model, input_ids, max_new_tokens):
    streamer = []

    def eval_generate(**kwargs):
        with torch.inference_mode(mode=True):
            model.generate(**kwargs)

    worker = ThreadPoolExecutor(max_workers=1).submit(
        eval_generate, input_ids=input_ids, max_new_tokens=max_new_tokens, streamer=streamer)
    worker.result()
    return streamer


torch.manual_seed(0)
model = Exllamav2HF()
prompt = torch.randint(0, 32, (1, 6))
tokens = generate_stream(model, prompt, max_new_tokens=8)
print("generated:", tokens)
