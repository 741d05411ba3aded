# expect: requires_grad_nonleaf
# source: https://github.com/adapter-hub/adapters/issues/384
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(5)


class WordTokenizer:
    def __init__(self, words):
        self.vocab = {"[PAD]": 0, "[UNK]": 1}
        for w in words:
            self.vocab.setdefault(w, len(self.vocab))

    def get_vocab(self):
        return dict(self.vocab)

    def __len__(self):
        return len(self.vocab)

    def encode(self, text, max_len=8):
        ids = [self.vocab.get(w, 1) for w in text.split()][:max_len]
        return ids + [0] * (max_len - len(ids))


class Config:
    hidden_size = 32
    num_layers = 2
    num_heads = 4
    reduction_factor = 4


class BottleneckAdapter(nn.Module):
    def __init__(self, hidden, reduction):
        super().__init__()
        self.down = nn.Linear(hidden, hidden // reduction)
        self.up = nn.Linear(hidden // reduction, hidden)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, h):
        return h + self.up(F.relu(self.down(h)))


class AdapterLayer(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden
        self.adapters = nn.ModuleDict()
        self.active = []

    def add_adapter(self, name, reduction):
        self.adapters[name] = BottleneckAdapter(self.hidden, reduction)

    def enable_adapters(self, names, unfreeze):
        self.active = list(names)
        for n in names:
            for p in self.adapters[n].parameters():
                p.requires_grad = unfreeze

    def forward(self, h):
        for n in self.active:
            h = self.adapters[n](h)
        return h


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = nn.MultiheadAttention(cfg.hidden_size, cfg.num_heads, batch_first=True)
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.ff = nn.Sequential(nn.Linear(cfg.hidden_size, 2 * cfg.hidden_size), nn.GELU(), nn.Linear(2 * cfg.hidden_size, cfg.hidden_size))
        self.ln2 = nn.LayerNorm(cfg.hidden_size)
        self.output_adapters = AdapterLayer(cfg.hidden_size)

    def forward(self, h, pad_mask):
        a, _ = self.attn(h, h, h, key_padding_mask=pad_mask)
        h = self.ln1(h + a)
        return self.ln2(h + self.output_adapters(self.ff(h)))


class EmbeddingAdaptersMixin:
    def init_embeddings(self):
        self.loaded_embeddings = {"default": self.get_input_embeddings()}
        self._active_embedding = "default"

    def add_embeddings(self, name, tokenizer, reference_embedding=None, reference_tokenizer=None):
        if name in self.loaded_embeddings:
            raise ValueError(f"An embedding with the name {name} already exists")
        embedding = nn.Embedding(len(tokenizer), self.config.hidden_size)
        embedding.requires_grad_(False)
        if reference_embedding is not None and reference_tokenizer is not None:
            tokens = set(tokenizer.get_vocab()) & set(reference_tokenizer.get_vocab())
            reference_vocab = reference_tokenizer.get_vocab()
            vocab = tokenizer.get_vocab()
            for t in tokens:
                embedding.weight[vocab[t]] = self.loaded_embeddings[reference_embedding].weight[reference_vocab[t]].clone()
        embedding.train(False)
        self.loaded_embeddings[name] = embedding
        self.set_active_embeddings(name)

    def set_active_embeddings(self, name):
        self.loaded_embeddings[self._active_embedding] = self.get_input_embeddings()
        self.set_input_embeddings(self.loaded_embeddings[name])
        self._active_embedding = name


class ModelAdaptersMixin:
    def add_adapter(self, name):
        for block in self.blocks:
            block.output_adapters.add_adapter(name, self.config.reduction_factor)

    def freeze_model(self, freeze=True):
        for param in self.parameters():
            param.requires_grad = not freeze  # raises
        self.model_frozen = freeze

    def train_adapter(self, names):
        self.train()
        self.freeze_model(True)
        for block in self.blocks:
            block.output_adapters.enable_adapters(names, True)


class TinyEncoder(nn.Module, EmbeddingAdaptersMixin, ModelAdaptersMixin):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.config = cfg
        self.embeddings = nn.Embedding(vocab_size, cfg.hidden_size)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.num_layers)])
        self.init_embeddings()

    def get_input_embeddings(self):
        return self.embeddings

    def set_input_embeddings(self, emb):
        self.embeddings = emb

    def forward(self, ids):
        pad_mask = ids == 0
        h = self.embeddings(ids)
        for block in self.blocks:
            h = block(h, pad_mask)
        keep = (~pad_mask).unsqueeze(-1).float()
        return (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)


class ClassificationHead(nn.Module):
    def __init__(self, hidden, n_labels):
        super().__init__()
        self.proj = nn.Linear(hidden, n_labels)

    def forward(self, pooled):
        return self.proj(pooled)


def build_data(tokenizer):
    pos = ["good fine great movie", "great story good cast", "fine good acting"]
    neg = ["bad dull boring movie", "boring story bad cast", "dull bad acting"]
    texts = pos * 4 + neg * 4
    labels = [1] * 12 + [0] * 12
    return torch.tensor([tokenizer.encode(t) for t in texts]), torch.tensor(labels)


def main():
    base_words = "good bad movie story cast acting great dull".split()
    base_tok = WordTokenizer(base_words)
    new_tok = WordTokenizer(base_words[:6] + "fine boring".split())
    cfg = Config()
    model = TinyEncoder(cfg, len(base_tok))
    head = ClassificationHead(cfg.hidden_size, 2)

    model.add_embeddings("domain", new_tok, reference_embedding="default", reference_tokenizer=base_tok)
    model.add_adapter("sentiment")
    model.train_adapter(["sentiment"])

    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=5e-3)
    ids, labels = build_data(new_tok)
    for epoch in range(4):
        perm = torch.randperm(ids.shape[0])
        for i in range(0, len(perm), 8):
            idx = perm[i:i + 8]
            loss = F.cross_entropy(head(model(ids[idx])), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")
    print("trainable:", sum(p.numel() for p in params))


if __name__ == "__main__":
    main()
