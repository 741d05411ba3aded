# expect: clean
# source: https://github.com/Hunter-DDM/knowledge-neurons/issues/14
"""Knowledge neurons: attribute a fact to FFN neurons with integrated gradients,
then edit the fact by rewriting the FFN output-weight columns of those neurons.

A tiny BERT-style masked LM is first trained on synthetic (subject, relation,
object) facts of the form "[CLS] s r [MASK] [SEP]".  For a probe fact we scale
the intermediate FFN activations from 0 to their observed value, integrate the
gradient of the gold-object probability, keep neurons above a threshold, and
replace the old object's embedding by the new one in their value vectors.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--n_subjects", type=int, default=24)
    p.add_argument("--n_relations", type=int, default=3)
    p.add_argument("--n_objects", type=int, default=12)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--intermediate", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--pretrain_steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--ig_steps", type=int, default=8)
    p.add_argument("--threshold_ratio", type=float, default=0.2)
    p.add_argument("--lambda_1", type=float, default=1.0)
    p.add_argument("--lambda_2", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args([])


class Vocab:
    def __init__(self, args):
        self.special = ["[PAD]", "[CLS]", "[SEP]", "[MASK]"]
        self.subj0 = len(self.special)
        self.rel0 = self.subj0 + args.n_subjects
        self.obj0 = self.rel0 + args.n_relations
        self.size = self.obj0 + args.n_objects
        self.cls, self.sep, self.mask = 1, 2, 3


class Intermediate(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.dense = nn.Linear(hidden, inter)

    def forward(self, x):
        return F.gelu(self.dense(x))


class Output(nn.Module):
    def __init__(self, inter, hidden):
        super().__init__()
        self.dense = nn.Linear(inter, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h, residual):
        return self.norm(self.dense(h) + residual)


class EncoderLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attn = nn.MultiheadAttention(args.hidden, args.heads, batch_first=True)
        self.attn_norm = nn.LayerNorm(args.hidden)
        self.intermediate = Intermediate(args.hidden, args.intermediate)
        self.output = Output(args.intermediate, args.hidden)

    def forward(self, x):
        a, _ = self.attn(x, x, x, need_weights=False)
        x = self.attn_norm(x + a)
        return self.output(self.intermediate(x), x)


class TinyBertForMaskedLM(nn.Module):
    def __init__(self, args, vocab):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab.size, args.hidden)
        self.position_embeddings = nn.Embedding(8, args.hidden)
        self.layer = nn.ModuleList([EncoderLayer(args) for _ in range(args.layers)])
        self.decoder = nn.Linear(args.hidden, vocab.size)
        self.decoder.weight = self.word_embeddings.weight

    def forward(self, input_ids):
        x = self.word_embeddings(input_ids) + self.position_embeddings(torch.arange(input_ids.size(1)))
        for layer in self.layer:
            x = layer(x)
        return self.decoder(x)


def build_facts(args, vocab, g):
    facts = {}
    for s in range(args.n_subjects):
        for r in range(args.n_relations):
            facts[(s, r)] = int(torch.randint(0, args.n_objects, (1,), generator=g))
    return facts


def encode(vocab, s, r):
    return torch.tensor([[vocab.cls, vocab.subj0 + s, vocab.rel0 + r, vocab.mask, vocab.sep]])


def pretrain(model, facts, vocab, args):
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    keys = list(facts.keys())
    ids = torch.cat([encode(vocab, s, r) for s, r in keys])
    tgt = torch.tensor([vocab.obj0 + facts[k] for k in keys])
    for step in range(args.pretrain_steps):
        logits = model(ids)[:, 3]
        loss = F.cross_entropy(logits, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            acc = (logits.argmax(-1) == tgt).float().mean().item()
            print(f"pretrain step {step:3d} loss {loss.item():.3f} acc {acc:.2f}")


class KnowledgeNeurons:
    def __init__(self, model, vocab, args):
        self.model, self.vocab, self.args = model, vocab, args
        self.mask_pos = 3

    def _get_activations(self, ids, layer_idx):
        store = {}
        handle = self.model.layer[layer_idx].intermediate.register_forward_hook(
            lambda m, i, o: store.__setitem__("act", o.detach()))
        with torch.no_grad():
            logits = self.model(ids)
        handle.remove()
        return store["act"][0, self.mask_pos], logits

    def integrated_gradients(self, ids, target, layer_idx):
        baseline, _ = self._get_activations(ids, layer_idx)
        steps = self.args.ig_steps
        scaled = (torch.linspace(0, 1, steps + 1)[1:, None] * baseline[None]).requires_grad_(True)

        def patch(m, i, o):
            o = o.clone()
            o[:, self.mask_pos] = scaled
            return o

        handle = self.model.layer[layer_idx].intermediate.register_forward_hook(patch)
        probs = F.softmax(self.model(ids.repeat(steps, 1))[:, self.mask_pos], dim=-1)[:, target]
        handle.remove()
        grads = torch.autograd.grad(probs.sum(), scaled)[0]
        return (baseline * grads.mean(0)).detach()

    def get_coarse_neurons(self, ids, target):
        scores = torch.stack([self.integrated_gradients(ids, target, l) for l in range(len(self.model.layer))])
        thresh = scores.max() * self.args.threshold_ratio
        return [tuple(idx) for idx in (scores > thresh).nonzero().tolist()]

    def edit_knowledge(self, neurons, ori_obj, tgt_obj):
        emb = self.model.word_embeddings.weight
        ori_pred_emb = emb[self.vocab.obj0 + ori_obj]
        tgt_emb = emb[self.vocab.obj0 + tgt_obj]
        with torch.no_grad():
            for layer, pos in neurons:
                w = self.model.layer[layer].output.dense.weight
                w[:, pos] -= ori_pred_emb * self.args.lambda_1
                w[:, pos] += tgt_emb * self.args.lambda_2


def predict(model, vocab, s, r):
    with torch.no_grad():
        return int(model(encode(vocab, s, r))[0, 3, vocab.obj0:].argmax())


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    vocab = Vocab(args)
    facts = build_facts(args, vocab, g)
    model = TinyBertForMaskedLM(args, vocab)
    model.train()
    pretrain(model, facts, vocab, args)
    model.eval()
    kn = KnowledgeNeurons(model, vocab, args)
    for (s, r), obj in list(facts.items())[:3]:
        ids = encode(vocab, s, r)
        neurons = kn.get_coarse_neurons(ids, vocab.obj0 + obj)
        new_obj = (obj + 1) % args.n_objects
        before = predict(model, vocab, s, r)
        kn.edit_knowledge(neurons, obj, new_obj)
        after = predict(model, vocab, s, r)
        print(f"fact ({s},{r})->{obj}: {len(neurons)} neurons, pred {before} -> {after} (target {new_obj})")


if __name__ == "__main__":
    main()
