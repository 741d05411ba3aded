# expect: clean
# source: https://github.com/cisnlp/simalign/issues/15
"""Word alignment from multilingual contextual embeddings (SimAlign, examples/align_files.py).

An EmbeddingLoader runs a small multilingual BERT-like encoder over the word pieces of a
source and a target sentence and returns the vectors of one hidden layer; the aligner
turns cosine similarities into alignments with argmax (fwd/rev/inter) and IterMax, with
optional distortion.  With --token-type word the word-piece vectors of each word are
averaged first.  Random encoder weights, an in-memory parallel corpus, CPU only.
"""
import argparse
import random
from typing import Dict, List

import numpy as np
import torch
import torch.nn as nn


def get_args(argv=None):
    p = argparse.ArgumentParser(description="Extract alignments for a parallel corpus")
    p.add_argument("--token-type", type=str, choices=["bpe", "word"], default="word")
    p.add_argument("--matching-methods", type=str, default="mai")
    p.add_argument("--distortion", type=float, default=0.0)
    p.add_argument("--layer", type=int, default=2)
    p.add_argument("--hidden", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


class PieceTokenizer:
    def __init__(self):
        self.vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3}

    def tokenize(self, word):
        pieces = [word[i:i + 3] for i in range(0, len(word), 3)]
        return [pieces[0]] + ["##" + p for p in pieces[1:]]

    def convert_tokens_to_ids(self, tokens):
        for t in tokens:
            self.vocab.setdefault(t, len(self.vocab))
        return [self.vocab[t] for t in tokens]

    def prepare_for_model(self, ids):
        return torch.tensor([[1] + ids + [2]])


class TinyMultilingualEncoder(nn.Module):
    """Stand-in for bert-base-multilingual-cased: returns all hidden states."""

    def __init__(self, vocab_size=512, hidden=24, layers=3, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden)
        self.pos = nn.Embedding(64, hidden)
        self.layers = nn.ModuleList([nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout=0.0,
                                                                batch_first=True) for _ in range(layers)])

    def forward(self, input_ids):
        h = self.embed(input_ids) + self.pos(torch.arange(input_ids.size(1)))
        hidden_states = [h]
        for layer in self.layers:
            h = layer(h)
            hidden_states.append(h)
        return h, None, tuple(hidden_states)


class EmbeddingLoader:
    def __init__(self, hidden=24, layer=2, device=torch.device("cpu")):
        self.device = device
        self.layer = layer
        self.tokenizer = PieceTokenizer()
        self.emb_model = TinyMultilingualEncoder(hidden=hidden)
        self.emb_model.eval()
        self.emb_model.to(self.device)

    def get_embed_list(self, sent_pair):
        sent_ids = [self.tokenizer.convert_tokens_to_ids(x) for x in sent_pair]
        inputs = [self.tokenizer.prepare_for_model(ids) for ids in sent_ids]
        outputs = [self.emb_model(in_ids.to(self.device)) for in_ids in inputs]
        # use vectors from the configured layer, drop [CLS]/[SEP]
        return [x[2][self.layer][0][1:-1].cpu().detach().numpy() for x in outputs]


def cosine_similarity(X, Y):
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    Xn = X / (np.linalg.norm(X, axis=1, keepdims=True) + 1e-12)
    Yn = Y / (np.linalg.norm(Y, axis=1, keepdims=True) + 1e-12)
    return Xn @ Yn.T


class SentenceAligner:
    def __init__(self, args):
        all_matching_methods = {"a": "inter", "i": "itermax", "f": "fwd", "r": "rev", "m": "inter"}
        self.token_type = args.token_type
        self.distortion = args.distortion
        self.matching_methods = sorted({all_matching_methods[m] for m in args.matching_methods})
        self.embed_loader = EmbeddingLoader(hidden=args.hidden, layer=args.layer)

    @staticmethod
    def get_similarity(X, Y):
        return (cosine_similarity(X, Y) + 1.0) / 2.0

    @staticmethod
    def get_alignment_matrix(sim_matrix):
        m, n = sim_matrix.shape
        forward = np.eye(n)[sim_matrix.argmax(axis=1)]
        backward = np.eye(m)[sim_matrix.argmax(axis=0)]
        return forward, backward.transpose()

    @staticmethod
    def apply_distortion(sim_matrix, ratio=0.5):
        shape = sim_matrix.shape
        if (shape[0] < 2 or shape[1] < 2) or ratio == 0.0:
            return sim_matrix
        pos_x = np.array([[y / float(shape[1] - 1) for y in range(shape[1])] for _ in range(shape[0])])
        pos_y = np.array([[x / float(shape[0] - 1) for x in range(shape[0])] for _ in range(shape[1])])
        return np.multiply(sim_matrix, 1.0 - ((pos_x - np.transpose(pos_y)) ** 2) * ratio)

    @staticmethod
    def iter_max(sim_matrix, max_count=2):
        alpha_ratio = 0.9
        m, n = sim_matrix.shape
        forward = np.eye(n)[sim_matrix.argmax(axis=1)]
        backward = np.eye(m)[sim_matrix.argmax(axis=0)]
        inter = forward * backward.transpose()
        if min(m, n) <= 2:
            return inter
        count = 1
        while count < max_count:
            mask_x = 1.0 - np.tile(inter.sum(1)[:, np.newaxis], (1, n)).clip(0.0, 1.0)
            mask_y = 1.0 - np.tile(inter.sum(0)[np.newaxis, :], (m, 1)).clip(0.0, 1.0)
            mask = ((alpha_ratio * mask_x) + (alpha_ratio * mask_y)).clip(0.0, 1.0)
            mask_zeros = 1.0 - ((1.0 - mask_x) * (1.0 - mask_y))
            new_sim = sim_matrix * mask
            fwd = np.eye(n)[new_sim.argmax(axis=1)] * mask_zeros
            bac = np.eye(m)[new_sim.argmax(axis=0)].transpose() * mask_zeros
            new_inter = fwd * bac
            if np.array_equal(inter + new_inter, inter):
                break
            inter = inter + new_inter
            count += 1
        return inter

    def word_vectors(self, vectors, l1_tokens, l2_tokens):
        w2b_map = []
        for tokens in (l1_tokens, l2_tokens):
            cnt, spans = 0, []
            for wlist in tokens:
                spans.append(list(range(cnt, cnt + len(wlist))))
                cnt += len(wlist)
            w2b_map.append(spans)
        new_vectors = []
        for l_id in range(2):
            w_vector = [vectors[l_id][word_set].mean(0) for word_set in w2b_map[l_id]]
            new_vectors.append(np.array(w_vector))
        return new_vectors

    def get_word_aligns(self, src_sent: List[str], trg_sent: List[str]) -> Dict[str, list]:
        tok = self.embed_loader.tokenizer
        l1_tokens = [tok.tokenize(w) for w in src_sent]
        l2_tokens = [tok.tokenize(w) for w in trg_sent]
        bpe_lists = [[bpe for w in sent for bpe in w] for sent in (l1_tokens, l2_tokens)]
        l1_b2w = [i for i, wl in enumerate(l1_tokens) for _ in wl]
        l2_b2w = [i for i, wl in enumerate(l2_tokens) for _ in wl]

        vectors = self.embed_loader.get_embed_list(bpe_lists)
        if self.token_type == "word":
            vectors = self.word_vectors(vectors, l1_tokens, l2_tokens)

        sim = self.apply_distortion(self.get_similarity(vectors[0], vectors[1]), self.distortion)
        all_mats = {}
        all_mats["fwd"], all_mats["rev"] = self.get_alignment_matrix(sim)
        all_mats["inter"] = all_mats["fwd"] * all_mats["rev"]
        all_mats["itermax"] = self.iter_max(sim)

        aligns = {x: set() for x in self.matching_methods}
        for i in range(sim.shape[0]):
            for j in range(sim.shape[1]):
                for ext in self.matching_methods:
                    if all_mats[ext][i, j] > 0:
                        if self.token_type == "bpe":
                            aligns[ext].add((l1_b2w[i], l2_b2w[j]))
                        else:
                            aligns[ext].add((i, j))
        return {ext: sorted(v) for ext, v in aligns.items()}


def load_corpus(rng):
    src_words = ["the", "house", "is", "small", "green", "garden", "children", "play", "today"]
    trg_words = ["das", "haus", "ist", "klein", "gruen", "garten", "kinder", "spielen", "heute"]
    corpus = []
    for _ in range(4):
        idx = rng.sample(range(len(src_words)), 5)
        corpus.append(([src_words[i] for i in idx], [trg_words[i] for i in idx]))
    return corpus


def main(argv=None):
    args = get_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    aligner = SentenceAligner(args)
    corpus = load_corpus(random.Random(args.seed))
    outputs = {m: [] for m in aligner.matching_methods}
    for start in range(0, len(corpus), args.batch_size):
        for src, trg in corpus[start:start + args.batch_size]:
            aligns = aligner.get_word_aligns(src, trg)
            for m in outputs:
                outputs[m].append(" ".join(f"{i}-{j}" for i, j in aligns[m]))
    for m, lines in outputs.items():
        print(m, lines[0])


if __name__ == "__main__":
    main([])
