# expect: clean
# source: https://github.com/ccsasuke/umwe/issues/5
"""Unsupervised multilingual word embeddings (UMWE / MUSE-style): adversarial
training of per-language mappings into a shared target space, followed by the
evaluator (word translation with CSLS, Europarl-style sentence translation).
Synthetic embeddings and parallel sentences replace the fastText/Europarl files.
"""
from argparse import Namespace

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Discriminator(nn.Module):
    def __init__(self, params, lang):
        super().__init__()
        self.lang = lang
        self.emb_dim = params.emb_dim
        layers = [nn.Dropout(params.dis_input_dropout)]
        for i in range(params.dis_layers + 1):
            input_dim = self.emb_dim if i == 0 else params.dis_hid_dim
            output_dim = 1 if i == params.dis_layers else params.dis_hid_dim
            layers.append(nn.Linear(input_dim, output_dim))
            if i < params.dis_layers:
                layers.append(nn.LeakyReLU(0.2))
                layers.append(nn.Dropout(params.dis_dropout))
        layers.append(nn.Sigmoid())
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        assert x.dim() == 2 and x.size(1) == self.emb_dim
        return self.layers(x).view(-1)


def synthetic_embeddings(params, rng):
    tgt = rng.randn(params.n_words, params.emb_dim).astype(np.float32)
    out = {params.tgt_lang: tgt}
    for lang in params.src_langs:
        q, _ = np.linalg.qr(rng.randn(params.emb_dim, params.emb_dim))
        out[lang] = (tgt @ q + 0.05 * rng.randn(*tgt.shape)).astype(np.float32)
    return out


def build_model(params):
    rng = np.random.RandomState(params.seed)
    raw = synthetic_embeddings(params, rng)
    params.vocabs, embs = {}, {}
    for lang in params.all_langs:
        params.vocabs[lang] = {"%s_w%d" % (lang, i): i for i in range(params.n_words)}
        emb = nn.Embedding(params.n_words, params.emb_dim, sparse=True)
        emb.weight.data.copy_(torch.from_numpy(raw[lang]))
        embs[lang] = emb
    mappings = {lang: nn.Linear(params.emb_dim, params.emb_dim, bias=False)
                for lang in params.src_langs}
    tgt_map = nn.Linear(params.emb_dim, params.emb_dim, bias=False)
    for p in tgt_map.parameters():
        p.requires_grad = False
    mappings[params.tgt_lang] = tgt_map
    for mapping in mappings.values():
        mapping.weight.data.copy_(torch.diag(torch.ones(params.emb_dim)))
    discriminators = {lang: Discriminator(params, lang) for lang in params.all_langs}
    return embs, mappings, discriminators


def apply_mapping(mapping, input_emb):
    bs = 4096
    with torch.no_grad():
        output_emb = input_emb.clone()
        for k in range(0, len(input_emb), bs):
            output_emb[k:k + bs] = mapping(input_emb[k:k + bs])
        return output_emb


def get_nn_avg_dist(emb, query, knn):
    scores = query.mm(emb.transpose(0, 1))
    return scores.topk(knn, dim=1, largest=True, sorted=True)[0].mean(1).numpy()


def bow_idf(sentences, word_vec, idf_dict=None):
    embeddings = []
    for sent in sentences:
        sent = set(sent)
        list_words = [w for w in sent if w in word_vec and w in idf_dict]
        if len(list_words) > 0:
            sentvec = [word_vec[w] * idf_dict[w] for w in list_words]
            sentvec = sentvec / np.sum([idf_dict[w] for w in list_words])
        else:
            sentvec = [word_vec[list(word_vec.keys())[0]]]
        embeddings.append(np.sum(sentvec, axis=0))
    return np.vstack(embeddings)


def get_idf(europarl, src_lg, tgt_lg, n_idf, offset):
    idf = {src_lg: {}, tgt_lg: {}}
    for k, lg in enumerate(idf):
        start_idx, end_idx = offset + k * n_idf, offset + (k + 1) * n_idf
        for sent in europarl[lg][start_idx:end_idx]:
            for word in set(sent):
                idf[lg][word] = idf[lg].get(word, 0) + 1
        n_doc = len(europarl[lg][start_idx:end_idx])
        for word in idf[lg]:
            idf[lg][word] = max(1, np.log10(n_doc / (idf[lg][word])))
    return idf


def load_europarl_data(lg1, lg2, n_max, n_words, rng):
    data = {lg1: [], lg2: []}
    for _ in range(n_max):
        ids = rng.randint(0, n_words, size=rng.randint(5, 12))
        data[lg1].append(["%s_w%d" % (lg1, i) for i in ids])
        data[lg2].append(["%s_w%d" % (lg2, i) for i in ids])
    return {lg1: np.array(data[lg1], dtype=object), lg2: np.array(data[lg2], dtype=object)}


def get_sent_translation_accuracy(data, lg1, word2id1, emb1, lg2, word2id2, emb2,
                                  n_keys, n_queries, method, idf):
    # get word vectors dictionaries
    emb1 = emb1.cpu().detach().numpy()
    emb2 = emb2.cpu().detach().numpy()
    word_vec1 = dict([(w, emb1[word2id1[w]]) for w in word2id1])
    word_vec2 = dict([(w, emb2[word2id2[w]]) for w in word2id2])
    word_vect = {lg1: word_vec1, lg2: word_vec2}
    keys = bow_idf(data[lg2][:n_keys], word_vect[lg2], idf_dict=idf[lg2])
    rng = np.random.RandomState(1234)
    idx_query = rng.choice(range(n_keys), size=n_queries, replace=False)
    queries = bow_idf(data[lg1][idx_query], word_vect[lg1], idf_dict=idf[lg1])
    queries = torch.from_numpy(queries).float()
    queries = queries / queries.norm(2, 1, keepdim=True).expand_as(queries)
    keys = torch.from_numpy(keys).float()
    keys = keys / keys.norm(2, 1, keepdim=True).expand_as(keys)
    if method == "nn":
        scores = keys.mm(queries.transpose(0, 1)).transpose(0, 1)
    else:
        knn = int(method[len("csls_knn_"):])
        average_dist_keys = torch.from_numpy(get_nn_avg_dist(queries, keys, knn))
        average_dist_queries = torch.from_numpy(get_nn_avg_dist(keys, queries, knn))
        scores = keys.mm(queries.transpose(0, 1)).transpose(0, 1)
        scores.mul_(2)
        scores.sub_(average_dist_queries[:, None].float() + average_dist_keys[None, :].float())
    top_matches = scores.topk(10, 1, True)[1]
    results = []
    for k in [1, 5, 10]:
        top_k_matches = (top_matches[:, :k] == torch.from_numpy(idx_query)[:, None]).sum(1)
        results.append(("sent-precision_at_%i" % k, 100 * top_k_matches.float().numpy().mean()))
    return results


class Evaluator:
    def __init__(self, trainer):
        self.params = trainer.params
        self.embs, self.mappings = trainer.embs, trainer.mappings
        self.vocabs = trainer.params.vocabs

    def word_translation(self, to_log):
        tgt_emb = F.normalize(self.embs[self.params.tgt_lang].weight.data, dim=1)
        for src_lang in self.params.src_langs:
            src_emb = apply_mapping(self.mappings[src_lang], self.embs[src_lang].weight)
            src_emb = F.normalize(src_emb, dim=1)
            pred = src_emb.mm(tgt_emb.t()).argmax(1)
            acc = (pred == torch.arange(len(pred))).float().mean().item() * 100
            to_log["%s-%s_precision_at_1-nn" % (src_lang, self.params.tgt_lang)] = acc

    def sent_translation(self, to_log):
        n_keys, n_queries, n_idf = self.params.n_keys, self.params.n_queries, self.params.n_idf
        if not hasattr(self, "europarl_data"):
            self.europarl_data = {}
        tgt_lang = self.params.tgt_lang
        for src_lang in self.params.src_langs:
            lang_pair = (src_lang, tgt_lang)
            if lang_pair not in self.europarl_data:
                self.europarl_data[lang_pair] = load_europarl_data(
                    src_lang, tgt_lang, n_keys + 2 * n_idf, self.params.n_words,
                    np.random.RandomState(7))
            # mapped word embeddings
            src_emb = apply_mapping(self.mappings[src_lang], self.embs[src_lang].weight)
            tgt_emb = self.embs[tgt_lang].weight
            idf = get_idf(self.europarl_data[lang_pair], src_lang, tgt_lang, n_idf, n_keys)
            for method in ["nn", "csls_knn_10"]:
                results = get_sent_translation_accuracy(
                    self.europarl_data[lang_pair], src_lang, self.vocabs[src_lang], src_emb,
                    tgt_lang, self.vocabs[tgt_lang], tgt_emb, n_keys=n_keys,
                    n_queries=n_queries, method=method, idf=idf)
                to_log.update([("%s_to_%s_%s-%s" % (tgt_lang, src_lang, k, method), v)
                               for k, v in results])

    def all_eval(self, to_log):
        self.word_translation(to_log)
        self.sent_translation(to_log)


class Trainer:
    def __init__(self, embs, mappings, discriminators, params):
        self.embs, self.mappings, self.discriminators = embs, mappings, discriminators
        self.params = params
        self.map_optimizer = torch.optim.SGD(
            [p for l in params.src_langs for p in mappings[l].parameters()], lr=params.map_lr)
        self.dis_optimizer = torch.optim.SGD(
            [p for d in discriminators.values() for p in d.parameters()], lr=params.dis_lr)

    def get_dis_xy(self, src_lang, tgt_lang, volatile):
        bs = self.params.batch_size
        src_ids = torch.randint(0, self.params.dis_most_frequent, (bs,))
        tgt_ids = torch.randint(0, self.params.dis_most_frequent, (bs,))
        with torch.set_grad_enabled(not volatile):
            src_emb = self.mappings[src_lang](self.embs[src_lang](src_ids).detach())
            tgt_emb = self.embs[tgt_lang](tgt_ids).detach()
        x = torch.cat([src_emb, tgt_emb], 0)
        y = torch.FloatTensor(2 * bs).zero_()
        y[:bs] = 1 - self.params.dis_smooth
        y[bs:] = self.params.dis_smooth
        return x, y

    def dis_step(self, stats):
        tgt = self.params.tgt_lang
        for src in self.params.src_langs:
            self.discriminators[tgt].train()
            x, y = self.get_dis_xy(src, tgt, volatile=True)
            preds = self.discriminators[tgt](x.detach())
            loss = F.binary_cross_entropy(preds, y)
            stats["DIS_COSTS"].append(loss.item())
            self.dis_optimizer.zero_grad()
            loss.backward()
            self.dis_optimizer.step()

    def mapping_step(self):
        tgt = self.params.tgt_lang
        loss = 0
        for src in self.params.src_langs:
            self.discriminators[tgt].eval()
            x, y = self.get_dis_xy(src, tgt, volatile=False)
            preds = self.discriminators[tgt](x)
            loss = loss + F.binary_cross_entropy(preds, 1 - y)
        self.map_optimizer.zero_grad()
        (self.params.dis_lambda * loss).backward()
        self.map_optimizer.step()
        self.orthogonalize()

    def orthogonalize(self):
        if self.params.map_beta > 0:
            beta = self.params.map_beta
            for src in self.params.src_langs:
                W = self.mappings[src].weight.data
                W.copy_((1 + beta) * W - beta * W.mm(W.transpose(0, 1).mm(W)))


def main():
    torch.manual_seed(0)
    params = Namespace(src_langs=["de", "es"], tgt_lang="en", emb_dim=16, n_words=300, seed=0,
                       dis_layers=2, dis_hid_dim=32, dis_dropout=0.0, dis_input_dropout=0.1,
                       dis_steps=3, dis_lambda=1.0, dis_most_frequent=300, dis_smooth=0.1,
                       batch_size=32, map_lr=0.1, dis_lr=0.1, map_beta=0.001, n_epochs=1,
                       epoch_size=60, n_keys=80, n_queries=20, n_idf=100)
    params.all_langs = params.src_langs + [params.tgt_lang]
    embs, mappings, discriminators = build_model(params)
    trainer = Trainer(embs, mappings, discriminators, params)
    evaluator = Evaluator(trainer)
    for n_epoch in range(params.n_epochs):
        stats = {"DIS_COSTS": []}
        for n_iter in range(0, params.epoch_size, params.batch_size):
            for _ in range(params.dis_steps):
                trainer.dis_step(stats)
            trainer.mapping_step()
        to_log = {"n_epoch": n_epoch}
        evaluator.all_eval(to_log)
        print("epoch %i - discriminator loss: %.4f" % (n_epoch, np.mean(stats["DIS_COSTS"])))
        print({k: round(float(v), 2) for k, v in to_log.items()})


if __name__ == "__main__":
    main()
