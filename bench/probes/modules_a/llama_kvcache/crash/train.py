# expect: freed_graph
# source: https://github.com/meta-llama/llama/pull/304
"""Fine-tune a tiny LLaMA-style transformer (RMSNorm, rotary embeddings,
SwiGLU, key/value cache) for next-character prediction on a small synthetic
text corpus, the way a benchmark harness runs forward+backward on the model."""
import torch
import torch.nn.functional as F

from model import ModelArgs, Transformer
from data import CharTokenizer, next_token_batches

torch.manual_seed(0)
corpus = " ".join(["the quick brown fox jumps over the lazy dog"] * 20)
tokenizer = CharTokenizer(corpus)

args = ModelArgs(dim=64, n_layers=2, n_heads=4, vocab_size=tokenizer.n_words,
                 multiple_of=32, max_batch_size=8, max_seq_len=32)
model = Transformer(args)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
model.train()
for step, (tokens, target) in enumerate(next_token_batches(tokenizer.encode(corpus), 16, 8, 4)):
    logits = model(tokens, start_pos=0)
    loss = F.cross_entropy(logits, target)
    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
