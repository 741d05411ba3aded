# expect: clean
# source: https://github.com/sgl-project/sglang/issues/33470
"""Minimal LLM serving runtime: model runner, paged KV pool, attention backend.

At start-up the runner warms up / autotunes the attention kernels with a
dummy batch, then the scheduler serves the incoming requests.
"""
import contextlib
import logging
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
logger = logging.getLogger("runtime")


@dataclass
class ServerArgs:
    vocab_size: int = 97
    hidden_size: int = 32
    num_heads: int = 4
    num_layers: int = 2
    max_running_requests: int = 8
    max_total_tokens: int = 256
    enable_flashinfer_autotune: bool = True
    max_new_tokens: int = 5


@dataclass
class Req:
    rid: int
    input_ids: List[int]
    output_ids: List[int] = field(default_factory=list)


class TokenToKVPool:
    def __init__(self, args):
        head_dim = args.hidden_size // args.num_heads
        self.k = torch.zeros(args.num_layers, args.max_total_tokens, args.num_heads, head_dim)
        self.v = torch.zeros_like(self.k)
        self.free = list(range(args.max_total_tokens))

    def alloc(self, n):
        out, self.free = self.free[:n], self.free[n:]
        return torch.tensor(out, dtype=torch.long)


_AUTOTUNE = {"enabled": False, "cache": {}}


@contextlib.contextmanager
def autotune(enabled=True):
    prev = _AUTOTUNE["enabled"]
    _AUTOTUNE["enabled"] = enabled
    try:
        yield
    finally:
        _AUTOTUNE["enabled"] = prev


class PagedAttnBackend:
    """Attention over the paged KV pool; index workspaces are allocated lazily."""

    def __init__(self, args):
        self.args = args
        self.kv_indptr = None
        self.kv_indices = None

    def init_forward_metadata(self, seq_lens, token_locs):
        bs = seq_lens.numel()
        if self.kv_indptr is None:
            self.kv_indptr = torch.zeros(self.args.max_running_requests + 1, dtype=torch.long)
            self.kv_indices = torch.zeros(self.args.max_total_tokens, dtype=torch.long)
        self.kv_indptr[1:bs + 1] = torch.cumsum(seq_lens, 0)
        self.kv_indices[:token_locs.numel()] = token_locs
        if _AUTOTUNE["enabled"]:
            _AUTOTUNE["cache"][bs] = "split_kv" if seq_lens.max() > 8 else "single_pass"

    def attend(self, q, pool_k, pool_v, b):
        start, end = self.kv_indptr[b].item(), self.kv_indptr[b + 1].item()
        idx = self.kv_indices[start:end]
        k, v = pool_k[idx], pool_v[idx]
        att = torch.einsum("hd,thd->ht", q, k) / k.shape[-1] ** 0.5
        return torch.einsum("ht,thd->hd", att.softmax(-1), v)


class TinyLM(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.embed = nn.Embedding(args.vocab_size, args.hidden_size)
        self.qkv = nn.ModuleList([nn.Linear(args.hidden_size, 3 * args.hidden_size) for _ in range(args.num_layers)])
        self.out = nn.ModuleList([nn.Linear(args.hidden_size, args.hidden_size) for _ in range(args.num_layers)])
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size)

    def forward(self, last_ids, last_locs, pool, backend):
        h = self.embed(last_ids)
        nh = self.args.num_heads
        for layer in range(self.args.num_layers):
            q, k, v = self.qkv[layer](h).chunk(3, dim=-1)
            pool.k[layer, last_locs] = k.view(-1, nh, k.shape[-1] // nh)
            pool.v[layer, last_locs] = v.view(-1, nh, v.shape[-1] // nh)
            heads = [backend.attend(q[b].view(nh, -1), pool.k[layer], pool.v[layer], b) for b in range(h.shape[0])]
            h = h + self.out[layer](torch.stack(heads).flatten(1))
        return self.lm_head(F.layer_norm(h, h.shape[-1:]))


class ModelRunner:
    def __init__(self, args):
        torch.manual_seed(0)
        self.args = args
        self.model = TinyLM(args).eval()
        self.pool = TokenToKVPool(args)
        self.attn_backend = PagedAttnBackend(args)
        self.req_locs = {}

    @torch.no_grad()
    def forward_decode(self, reqs):
        seq_lens = torch.tensor([len(r.input_ids) + len(r.output_ids) for r in reqs])
        locs = [self.req_locs[r.rid] for r in reqs]
        self.attn_backend.init_forward_metadata(seq_lens, torch.cat(locs))
        last_ids = torch.tensor([(r.input_ids + r.output_ids)[-1] for r in reqs])
        last_locs = torch.stack([l[-1] for l in locs])
        return self.model(last_ids, last_locs, self.pool, self.attn_backend)

    def _dummy_run(self, batch_size):
        reqs = [Req(rid=-(i + 1), input_ids=[1, 2, 3]) for i in range(batch_size)]
        for r in reqs:
            self.req_locs[r.rid] = self.pool.alloc(3)
        self.forward_decode(reqs)
        for r in reqs:
            self.pool.free.extend(self.req_locs.pop(r.rid).tolist())

    def flashinfer_autotune(self):
        if not self.args.enable_flashinfer_autotune:
            return
        logger.info("running autotune warmup")
        # Do not impose inference_mode here: buffers lazily created by the
        # warmup are reused (and updated in place) by the real forward.
        with autotune(True):
            self._dummy_run(self.args.max_running_requests)
        logger.info("autotune cache: %s", _AUTOTUNE["cache"])


class Scheduler:
    def __init__(self, runner):
        self.runner = runner
        self.waiting, self.running, self.finished = [], [], []

    def add_request(self, req):
        self.waiting.append(req)

    def step(self):
        while self.waiting and len(self.running) < self.runner.args.max_running_requests:
            req = self.waiting.pop(0)
            self.runner.req_locs[req.rid] = self.runner.pool.alloc(len(req.input_ids))
            self.running.append(req)
        logits = self.runner.forward_decode(self.running)
        for req, tok in zip(self.running, logits.argmax(-1).tolist()):
            req.output_ids.append(tok)
            self.runner.req_locs[req.rid] = torch.cat([self.runner.req_locs[req.rid], self.runner.pool.alloc(1)])
        done = [r for r in self.running if len(r.output_ids) >= self.runner.args.max_new_tokens]
        self.running = [r for r in self.running if r not in done]
        self.finished.extend(done)

    def run_until_idle(self):
        while self.waiting or self.running:
            self.step()


args = ServerArgs()
runner = ModelRunner(args)
runner.flashinfer_autotune()
scheduler = Scheduler(runner)
for i, prompt in enumerate([[5, 6, 7], [11, 12], [40, 41, 42, 43]]):
    scheduler.add_request(Req(rid=i, input_ids=prompt))
scheduler.run_until_idle()
for r in scheduler.finished:
    logger.info("req %d -> %s", r.rid, r.output_ids)
