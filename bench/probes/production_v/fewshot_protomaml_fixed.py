# expect: clean
# source: https://github.com/facebookresearch/higher/issues/70
"""First-order ProtoMAML for few-shot sequence labelling (MetaWSD layout).

A small transformer sequence model (the "learner") is adapted per episode on
the support set.  In ProtoMAML the output layer is initialised from class
prototypes of the support representations (weight = 2*prototype, bias =
-||prototype||^2).  The inner loop imitates higher's innerloop_ctx with
track_higher_grads=False (first-order), the output layer is updated manually
and the meta-gradients of the query loss (through the adapted learner and
through the prototypes) are accumulated into the learner's .grad.  Synthetic
token/label episodes, CPU only.
"""
import argparse
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=200)
    p.add_argument("--hidden_size", type=int, default=32)
    p.add_argument("--n_classes", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=10)
    p.add_argument("--updates", type=int, default=2)
    p.add_argument("--learner_lr", type=float, default=1e-2)
    p.add_argument("--output_lr", type=float, default=0.1)
    p.add_argument("--meta_lr", type=float, default=1e-3)
    p.add_argument("--meta_epochs", type=int, default=2)
    p.add_argument("--episodes_per_batch", type=int, default=2)
    p.add_argument("--proto_maml", action="store_true", default=True)
    p.add_argument("--fomaml", action="store_true", default=True)
    return p.parse_args(argv)


class Episode:
    def __init__(self, task_id, support, query, n_classes):
        self.task_id, self.support, self.query, self.n_classes = task_id, support, query, n_classes


def make_episodes(args, n, seed):
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for i in range(n):
        def batch(bs):
            x = torch.randint(0, args.vocab, (bs, args.seq_len), generator=g)
            y = (x % args.n_classes)
            y[:, -2:] = -1
            return x, y
        episodes.append(Episode("task_%d" % i, batch(6), batch(6), args.n_classes))
    return episodes


class TransformerSequenceModel(nn.Module):
    def __init__(self, vocab, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(vocab, hidden_size)
        self.pos = nn.Parameter(torch.randn(64, hidden_size) * 0.02)
        self.attn_qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.attn_out = nn.Linear(hidden_size, hidden_size)
        self.ff1 = nn.Linear(hidden_size, 2 * hidden_size)
        self.ff2 = nn.Linear(2 * hidden_size, hidden_size)
        self.norm1 = nn.LayerNorm(hidden_size)
        self.norm2 = nn.LayerNorm(hidden_size)

    def functional_forward(self, x, params):
        (pos, emb, qkv_w, qkv_b, out_w, out_b, f1_w, f1_b, f2_w, f2_b,
         n1_w, n1_b, n2_w, n2_b) = params
        h = F.embedding(x, emb) + pos[: x.shape[1]]
        q, k, v = F.linear(h, qkv_w, qkv_b).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(self.hidden_size), dim=-1)
        h = F.layer_norm(h + F.linear(att @ v, out_w, out_b), (self.hidden_size,), n1_w, n1_b)
        ff = F.linear(F.gelu(F.linear(h, f1_w, f1_b)), f2_w, f2_b)
        return F.layer_norm(h + ff, (self.hidden_size,), n2_w, n2_b)

    def forward(self, x):
        return self.functional_forward(x, list(self.parameters()))


class FirstOrderInnerLoop:
    """Stand-in for higher.innerloop_ctx(track_higher_grads=False)."""

    def __init__(self, model, lr):
        self.model = model
        self.lr = lr
        self.fast_params = [p for p in model.parameters()]

    def __call__(self, x):
        return self.model.functional_forward(x, self.fast_params)

    def step(self, loss):
        grads = torch.autograd.grad(loss, self.fast_params, retain_graph=True)
        self.fast_params = [(p - self.lr * g).detach().requires_grad_() for p, g in zip(self.fast_params, grads)]


class SeqMetaModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.learner = TransformerSequenceModel(args.vocab, args.hidden_size)
        self.learner_loss = nn.CrossEntropyLoss(ignore_index=-1)
        self.output_layer_weight = None
        self.output_layer_bias = None
        self.proto_maml = args.proto_maml

    def initialize_output_layer(self, n_classes):
        stdv = 1.0 / math.sqrt(self.learner.hidden_size)
        self.output_layer_weight = (-2 * stdv * torch.rand(n_classes, self.learner.hidden_size) + stdv).requires_grad_()
        self.output_layer_bias = (-2 * stdv * torch.rand(n_classes) + stdv).requires_grad_()

    def _build_prototypes(self, data_repr, data_label, num_outputs):
        n_dim = data_repr.shape[2]
        data_repr = data_repr.reshape(-1, n_dim)
        data_label = data_label.reshape(-1)
        prototypes = []
        for c in range(num_outputs):
            idx = torch.nonzero(data_label == c).view(-1)
            prototypes.append(data_repr[idx].mean(dim=0) if idx.numel() else data_repr.new_zeros(n_dim))
        return torch.stack(prototypes)

    def _initialize_with_proto_weights(self, support_repr, support_label, n_classes):
        prototypes = self._build_prototypes(support_repr, support_label, n_classes)
        self.output_layer_weight = 2 * prototypes
        self.output_layer_bias = -torch.norm(prototypes, dim=1) ** 2

    def output_layer(self, h):
        return F.linear(h, self.output_layer_weight, self.output_layer_bias)

    def forward(self, episodes, updates=1, testing=False):
        query_losses, accuracies = [], []
        learner_params = [p for p in self.learner.parameters() if p.requires_grad]
        for episode in episodes:
            self.initialize_output_layer(episode.n_classes)
            batch_x, batch_y = episode.support
            flearner = FirstOrderInnerLoop(self.learner, self.args.learner_lr)
            for i in range(updates):
                output = flearner(batch_x)
                if i == 0 and self.proto_maml:
                    self._initialize_with_proto_weights(output, batch_y, episode.n_classes)
                logits = self.output_layer(output)
                loss = self.learner_loss(logits.view(-1, episode.n_classes), batch_y.view(-1))
                w_grad, b_grad = torch.autograd.grad(loss, [self.output_layer_weight, self.output_layer_bias],
                                                     retain_graph=True)
                self.output_layer_weight.data -= self.args.output_lr * w_grad
                self.output_layer_bias.data -= self.args.output_lr * b_grad
                flearner.step(loss)

            qx, qy = episode.query
            q_logits = self.output_layer(flearner(qx))
            query_loss = self.learner_loss(q_logits.view(-1, episode.n_classes), qy.view(-1))
            if not testing:
                meta_grads = torch.autograd.grad(query_loss, flearner.fast_params, retain_graph=self.proto_maml)
                if self.proto_maml:
                    proto_grads = torch.autograd.grad(query_loss, learner_params)
                    meta_grads = [mg + pg for mg, pg in zip(meta_grads, proto_grads)]
                for param, mg in zip(learner_params, meta_grads):
                    param.grad = mg.detach() if param.grad is None else param.grad + mg.detach()
            valid = qy.view(-1) != -1
            acc = (q_logits.view(-1, episode.n_classes).argmax(-1)[valid] == qy.view(-1)[valid]).float().mean()
            query_losses.append(query_loss.item())
            accuracies.append(acc.item())
        if not testing:
            for param in learner_params:
                param.grad /= len(episodes)
        return query_losses, accuracies


class MetaLearning:
    def __init__(self, args):
        self.args = args
        self.meta_model = SeqMetaModel(args)
        params = [p for p in self.meta_model.learner.parameters() if p.requires_grad]
        self.meta_optimizer = torch.optim.Adam(params, lr=args.meta_lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.meta_optimizer, step_size=1, gamma=0.5)

    def train_step(self, episode_batch):
        self.meta_optimizer.zero_grad()
        losses, accs = self.meta_model(episode_batch, updates=self.args.updates)
        self.meta_optimizer.step()
        return sum(losses) / len(losses), sum(accs) / len(accs)

    def evaluate(self, episodes):
        losses, accs = [], []
        for ep in episodes:
            l, a = self.meta_model([ep], updates=self.args.updates, testing=True)
            losses += l
            accs += a
        return sum(accs) / len(accs)

    def training(self, train_episodes, val_episodes):
        bs = self.args.episodes_per_batch
        for epoch in range(self.args.meta_epochs):
            random.shuffle(train_episodes)
            for k in range(0, len(train_episodes), bs):
                loss, acc = self.train_step(train_episodes[k:k + bs])
                print("epoch %d batch %d: query loss %.4f acc %.3f" % (epoch, k // bs, loss, acc))
            self.scheduler.step()
            print("epoch %d val acc %.3f" % (epoch, self.evaluate(val_episodes)))


def main():
    random.seed(0)
    torch.manual_seed(0)
    args = parse_args([])
    train_episodes = make_episodes(args, 4, seed=1)
    val_episodes = make_episodes(args, 2, seed=2)
    MetaLearning(args).training(train_episodes, val_episodes)


if __name__ == "__main__":
    main()
