# expect: leaf_inplace
# source: https://github.com/facebookresearch/ParlAI/pull/3014
"""Task-token fine-tuning of a small ranking model in the style of ParlAI's
TorchAgent: an ``Opt`` dict, a model whose pretrained encoder is frozen except
for a learned task-token embedding, fp16 utilities (dynamic loss scaler, a
memory-efficient fp16 optimizer wrapper and a gradient clipping helper), a
warmup + invsqrt LR scheduler, ``train_step`` / ``eval_step`` and a small
``TrainLoop`` with periodic validation.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Opt(dict):
    """Options dict with a history of overrides, like parlai.core.opt.Opt."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.history = []

    def __setitem__(self, key, val):
        self.history.append((key, val))
        super().__setitem__(key, val)


DEFAULT_OPT = {
    "embedding_size": 32,
    "n_layers": 2,
    "vocab_size": 60,
    "n_tasks": 4,
    "learningrate": 0.01,
    "gradient_clip": 0.1,
    "fp16": True,
    "fp16_impl": "mem_efficient",
    "warmup_updates": 5,
    "freeze_encoder": True,
    "num_epochs": 3,
    "batchsize": 16,
    "validation_every_n_steps": 8,
    "no_cuda": True,
}


###############################################################################
# fp16 utilities
###############################################################################

def clip_grad_norm(params, max_norm: float = 0, sync: bool = False):
    """Clips grad norm; returns the norm before clipping."""
    if isinstance(params, torch.Tensor):
        params = [params]
    params = list(params)
    if len(params) == 1:
        p = params[0]
        grad_norm = torch.norm(p.grad)
        if grad_norm > max_norm > 0:
            clip_coef = max_norm / (grad_norm + 1e-6)
            p.mul_(clip_coef)  # raises
        return grad_norm
    elif max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    else:
        return torch.sqrt(sum(p.grad.data.norm() ** 2 for p in params if p.grad is not None))


def has_overflow(grad_norm):
    return grad_norm == float("inf") or grad_norm != grad_norm


class DynamicLossScaler(object):
    def __init__(self, init_scale=2.0 ** 7, scale_factor=2.0, scale_window=20):
        self.loss_scale = init_scale
        self.scale_factor = scale_factor
        self.scale_window = scale_window
        self._iter = 0
        self._last_overflow_iter = -1

    def update_scale(self, overflow):
        if overflow:
            self.loss_scale /= self.scale_factor
            self._last_overflow_iter = self._iter
        elif (self._iter - self._last_overflow_iter) % self.scale_window == 0:
            self.loss_scale *= self.scale_factor
        self._iter += 1


class MemoryEfficientFP16Optimizer(object):
    """Wrap an optimizer to support fp16 training without fp32 master copies."""

    def __init__(self, init_optimizer, loss_initial_scale=2.0 ** 7):
        self.optimizer = init_optimizer
        self.scaler = DynamicLossScaler(init_scale=loss_initial_scale)
        self._grads_are_scaled = False

    @property
    def params(self):
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                yield p

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def backward(self, loss):
        (loss * self.scaler.loss_scale).backward()
        self._grads_are_scaled = True

    def _unscale_grads(self, multiply_grads=1.0):
        if self._grads_are_scaled:
            self._grads_are_scaled = False
            multiply_grads = multiply_grads / self.scaler.loss_scale
        if multiply_grads != 1.0:
            for p in self.params:
                if p.grad is not None:
                    p.grad.data.mul_(multiply_grads)

    def clip_master_grads(self, gradient_clip):
        self._unscale_grads()
        grad_norm = clip_grad_norm(self.params, gradient_clip)
        overflow = has_overflow(grad_norm)
        self.scaler.update_scale(overflow)
        return grad_norm

    def step(self):
        self._unscale_grads()
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()
        self._grads_are_scaled = False


###############################################################################
# model
###############################################################################

class TaskTokenRanker(nn.Module):
    def __init__(self, opt):
        super().__init__()
        d = opt["embedding_size"]
        self.embeddings = nn.Embedding(opt["vocab_size"], d, padding_idx=0)
        self.task_embeddings = nn.Embedding(opt["n_tasks"], d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=2 * d,
                                           dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, opt["n_layers"])
        self.cand_proj = nn.Linear(d, d)

    def encode_context(self, tokens, task_ids):
        x = self.embeddings(tokens)
        task = self.task_embeddings(task_ids).unsqueeze(1)
        x = torch.cat([task, x], dim=1)
        mask = torch.cat([torch.zeros_like(task_ids, dtype=torch.bool).unsqueeze(1),
                          tokens.eq(0)], dim=1)
        h = self.encoder(x, src_key_padding_mask=mask)
        return h[:, 0]

    def forward(self, tokens, task_ids, cand_vecs):
        ctx = self.encode_context(tokens, task_ids)
        cands = self.cand_proj(self.embeddings(cand_vecs).mean(1))
        return ctx @ cands.t()


class ParlAILRScheduler(object):
    def __init__(self, optimizer, warmup_updates, hard_reset=False):
        self.warmup_updates = max(1, warmup_updates)
        self._number_training_updates = 0
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self._lr_lambda)

    def _lr_lambda(self, step):
        if step < self.warmup_updates:
            return (step + 1) / self.warmup_updates
        return math.sqrt(self.warmup_updates / (step + 1))

    def step(self, num_steps):
        self._number_training_updates = num_steps
        self.scheduler.step()


###############################################################################
# agent
###############################################################################

class TorchRankerAgent(object):
    def __init__(self, opt):
        self.opt = opt
        self.use_cuda = not opt["no_cuda"] and torch.cuda.is_available()
        self.fp16 = opt["fp16"]
        self.model = TaskTokenRanker(opt)
        if self.fp16 and self.use_cuda:
            self.model = self.model.half()
        if opt["freeze_encoder"]:
            self._freeze_all_but_task_embeddings()
        self.init_optim([p for p in self.model.parameters() if p.requires_grad])
        self.scheduler = ParlAILRScheduler(self.optimizer.optimizer if self.fp16
                                           else self.optimizer, opt["warmup_updates"])
        self._number_training_updates = 0

    def _freeze_all_but_task_embeddings(self):
        for name, p in self.model.named_parameters():
            p.requires_grad = name.startswith("task_embeddings")

    def init_optim(self, params):
        optim = torch.optim.SGD(params, lr=self.opt["learningrate"], momentum=0.9)
        if self.fp16 and self.opt["fp16_impl"] == "mem_efficient":
            optim = MemoryEfficientFP16Optimizer(optim)
        self.optimizer = optim

    def zero_grad(self):
        self.optimizer.zero_grad()

    def backward(self, loss):
        if self.fp16:
            self.optimizer.backward(loss)
        else:
            loss.backward()

    def update_params(self):
        self._number_training_updates += 1
        if self.opt["gradient_clip"] > 0:
            if self.fp16:
                grad_norm = self.optimizer.clip_master_grads(self.opt["gradient_clip"])
            else:
                grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(),
                                                     self.opt["gradient_clip"])
        self.optimizer.step()
        self.scheduler.step(self._number_training_updates)
        return float(grad_norm)

    def train_step(self, batch):
        self.model.train()
        self.zero_grad()
        scores = self.model(batch["text_vec"], batch["task_ids"], batch["cand_vecs"])
        loss = F.cross_entropy(scores, batch["label_idx"])
        self.backward(loss)
        gnorm = self.update_params()
        return {"loss": loss.item(), "gnorm": gnorm}

    def eval_step(self, batch):
        self.model.eval()
        with torch.no_grad():
            scores = self.model(batch["text_vec"], batch["task_ids"], batch["cand_vecs"])
        return (scores.argmax(1) == batch["label_idx"]).float().mean().item()


def make_batches(opt, n_batches, seed):
    g = torch.Generator().manual_seed(seed)
    bs, vocab = opt["batchsize"], opt["vocab_size"]
    batches = []
    for _ in range(n_batches):
        text = torch.randint(1, vocab, (bs, 10), generator=g)
        text[:, 7:] *= (torch.rand(bs, 3, generator=g) > 0.5).long()
        task_ids = torch.randint(0, opt["n_tasks"], (bs,), generator=g)
        cands = torch.randint(1, vocab, (bs, 4), generator=g)
        cands[:, 0] = text[:, 0]
        batches.append({"text_vec": text, "task_ids": task_ids, "cand_vecs": cands,
                        "label_idx": torch.arange(bs)})
    return batches


class TrainLoop(object):
    def __init__(self, opt):
        self.opt = opt
        self.agent = TorchRankerAgent(opt)
        self.train_batches = make_batches(opt, 8, seed=1)
        self.valid_batches = make_batches(opt, 2, seed=2)
        self.best_valid = None

    def validate(self):
        acc = sum(self.agent.eval_step(b) for b in self.valid_batches) / len(self.valid_batches)
        if self.best_valid is None or acc > self.best_valid:
            self.best_valid = acc
        return acc

    def train(self):
        steps = 0
        for epoch in range(self.opt["num_epochs"]):
            for batch in self.train_batches:
                metrics = self.agent.train_step(batch)
                steps += 1
                if steps % self.opt["validation_every_n_steps"] == 0:
                    acc = self.validate()
                    print("step %d loss %.3f gnorm %.3f valid_acc %.3f" % (
                        steps, metrics["loss"], metrics["gnorm"], acc))
        return self.best_valid


def main():
    torch.manual_seed(0)
    opt = Opt(DEFAULT_OPT)
    best = TrainLoop(opt).train()
    print("best valid acc %.3f" % best)


if __name__ == "__main__":
    main()
