# expect: clean
# source: https://github.com/NVlabs/VILA/pull/199
"""VILA-style multimodal fine-tuning: frozen LLM and vision tower, trainable
mm_projector, gradient checkpointing.  Text and image tokens are fused in
LlavaMetaForCausalLM._embed.  When a data-parallel rank gets a text-only batch
while other ranks have images, the image encoder is still run on a dummy image
so that all ranks use the same parameters.  Two ranks are emulated in one
process (their per-step media info is exchanged through `distributed`).
"""
from collections import defaultdict, deque
from itertools import chain
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(3)
IGNORE_INDEX = -100


class _Distributed:
    """Stand-in for llava.utils.distributed in a single process with `world_size` ranks."""

    def __init__(self):
        self.rank, self.world_infos = 0, {}

    def all_gather(self, obj):
        return [obj if r == self.rank else self.world_infos.get(r, []) for r in sorted(self.world_infos)]


distributed = _Distributed()


# ------------------------------------------------------------------ language model
class TinyLlamaModel(nn.Module):
    def __init__(self, vocab, hidden, layers):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(hidden, 4, 2 * hidden, dropout=0.0, batch_first=True) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.gradient_checkpointing = False

    def forward(self, inputs_embeds, attention_mask):
        t = inputs_embeds.size(1)
        causal = torch.full((t, t), float("-inf")).triu(1)
        h = inputs_embeds
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(layer, h, causal, None, True, use_reentrant=True)
            else:
                h = layer(h, src_mask=causal, is_causal=True)
        return self.norm(h)


class TinyLlamaForCausalLM(nn.Module):
    def __init__(self, vocab=48, hidden=32, layers=2):
        super().__init__()
        self.model = TinyLlamaModel(vocab, hidden, layers)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def gradient_checkpointing_enable(self):
        self.model.gradient_checkpointing = True

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)

        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def forward(self, inputs_embeds, attention_mask, labels):
        logits = self.lm_head(self.model(inputs_embeds, attention_mask))
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                               ignore_index=IGNORE_INDEX)
        return SimpleNamespace(loss=loss, logits=logits)


# ------------------------------------------------------------------ vision side
class VisionTower(nn.Module):
    def __init__(self, hidden=24, patch=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, hidden, patch, stride=patch)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, images):
        return self.norm(self.patch_embed(images).flatten(2).transpose(1, 2))


class BasicImageEncoder(nn.Module):
    def __init__(self, parent):
        super().__init__()
        self._parent = [parent]
        self.end_tokens = None

    def forward(self, images, config):
        parent = self._parent[0]
        feats = parent.get_mm_projector()(parent.get_vision_tower()(torch.stack(images)))
        return [f for f in feats]


class Tokenizer:
    media_token_ids = {"image": 1}
    pad_token_id = 0


# ------------------------------------------------------------------ llava_arch
class LlavaLlamaModel(nn.Module):
    def __init__(self, vocab=48, hidden=32):
        super().__init__()
        self.llm = TinyLlamaForCausalLM(vocab, hidden)
        self.vision_tower = VisionTower()
        self.mm_projector = nn.Sequential(nn.Linear(24, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.encoders = {"image": BasicImageEncoder(self)}
        self.tokenizer = Tokenizer()

    def get_llm(self):
        return self.llm

    def get_vision_tower(self):
        return self.vision_tower

    def get_mm_projector(self):
        return self.mm_projector

    def _embed(self, input_ids, media, media_config, labels, attention_mask):
        labels = labels if labels is not None else torch.full_like(input_ids, IGNORE_INDEX)
        attention_mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)

        # Extract text and media embeddings
        text_embeds = self.llm.model.embed_tokens(input_ids)
        media_embeds = self._embed_media_tokens(media, media_config)

        # This is a workaround to make sure the dummy embeddings are consumed
        while media_embeds.get("dummy"):
            dummy_embed = media_embeds["dummy"].popleft()
            text_embeds = text_embeds + torch.sum(dummy_embed) * 0

        # Remove padding
        batch_size = labels.shape[0]
        text_embeds = [text_embeds[k][attention_mask[k]] for k in range(batch_size)]
        labels = [labels[k][attention_mask[k]] for k in range(batch_size)]

        media_tokens = {token_id: name for name, token_id in self.tokenizer.media_token_ids.items()}
        inputs_m, labels_m = [], []
        for k in range(batch_size):
            inputs_mk, labels_mk = [], []
            pos = 0
            while pos < len(labels[k]):
                if input_ids[k][pos].item() in media_tokens:
                    end = pos + 1
                    inp = media_embeds[media_tokens[input_ids[k][pos].item()]].popleft()
                    lab = torch.full([inp.shape[0]], IGNORE_INDEX, dtype=labels[k].dtype)
                else:
                    end = pos
                    while end < len(labels[k]) and input_ids[k][end].item() not in media_tokens:
                        end += 1
                    inp, lab = text_embeds[k][pos:end], labels[k][pos:end]
                inputs_mk.append(inp)
                labels_mk.append(lab)
                pos = end
            inputs_m.append(torch.cat(inputs_mk, dim=0))
            labels_m.append(torch.cat(labels_mk, dim=0))

        for name in media_embeds:
            if media_embeds[name]:
                raise ValueError(f"Not all {name} embeddings are consumed!")
        return self._batchify_sequence(inputs_m, labels_m)

    def _embed_media_tokens(self, media, media_config):
        embeds = defaultdict(deque)
        for name in media:
            if self.training:
                # Gather metainfo of media objects from all ranks
                info = [{"shape": tensor.shape, "dtype": tensor.dtype} for tensor in media.get(name, [])]
                infos = list(chain(*distributed.all_gather(info)))

                # The entire batch does not contain any media objects of this type.
                if not infos:
                    continue

                # Create a dummy tensor to ensure the encoder is called, otherwise the training will hang.
                if media.get(name) is None or len(media[name]) == 0:
                    dummy = torch.zeros(infos[0]["shape"], dtype=infos[0]["dtype"])
                    embeds["dummy"].extend(self.encoders[name]([dummy], media_config[name]))
                    continue
            embeds[name] = deque(self.encoders[name](media[name], media_config[name]))
        return embeds

    def _batchify_sequence(self, inputs, labels):
        max_len = max(x.shape[0] for x in inputs)
        hidden = inputs[0].shape[-1]
        embeds, labs, mask = [], [], []
        for x, y in zip(inputs, labels):
            pad = max_len - x.shape[0]
            embeds.append(torch.cat([x, x.new_zeros(pad, hidden)], 0))
            labs.append(torch.cat([y, y.new_full((pad,), IGNORE_INDEX)], 0))
            mask.append(torch.cat([torch.ones(x.shape[0], dtype=torch.bool), torch.zeros(pad, dtype=torch.bool)]))
        return torch.stack(embeds), torch.stack(labs), torch.stack(mask)

    def forward(self, input_ids, media, media_config, labels, attention_mask):
        inputs_embeds, labels, attention_mask = self._embed(input_ids, media, media_config, labels, attention_mask)
        return self.llm(inputs_embeds=inputs_embeds, attention_mask=attention_mask, labels=labels)


# ------------------------------------------------------------------ data / train
def make_sample(with_image, text_len=8, vocab=48):
    ids = torch.randint(2, vocab, (text_len,))
    if with_image:
        ids = torch.cat([ids[:2], torch.tensor([Tokenizer.media_token_ids["image"]]), ids[2:]])
    return ids, ([torch.randn(3, 16, 16)] if with_image else [])


def collate(samples):
    max_len = max(len(s[0]) for s in samples)
    input_ids = torch.stack([F.pad(s[0], (0, max_len - len(s[0])), value=Tokenizer.pad_token_id) for s in samples])
    attention_mask = input_ids != Tokenizer.pad_token_id
    labels = input_ids.masked_fill(~attention_mask, IGNORE_INDEX)
    images = list(chain(*[s[1] for s in samples]))
    return {"input_ids": input_ids, "media": {"image": images}, "media_config": {"image": {}},
            "labels": labels, "attention_mask": attention_mask}


if __name__ == "__main__":
    training_args = SimpleNamespace(gradient_checkpointing=True, tune_language_model=False,
                                    tune_vision_tower=False, tune_mm_projector=True, lr=2e-4, steps=2)
    model = LlavaLlamaModel()
    if training_args.gradient_checkpointing:
        model.llm.gradient_checkpointing_enable()
        if hasattr(model.llm, "enable_input_require_grads"):
            model.llm.enable_input_require_grads()
    model.get_llm().requires_grad_(training_args.tune_language_model)
    model.get_vision_tower().requires_grad_(training_args.tune_vision_tower)
    model.get_mm_projector().requires_grad_(training_args.tune_mm_projector)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=training_args.lr)
    model.train()

    for step in range(training_args.steps):
        # rank 0 gets image-text pairs, rank 1 gets a text-only batch
        shards = {0: collate([make_sample(True), make_sample(True)]),
                  1: collate([make_sample(False), make_sample(False)])}
        distributed.world_infos = {r: [{"shape": t.shape, "dtype": t.dtype} for t in b["media"]["image"]]
                                   for r, b in shards.items()}
        optimizer.zero_grad()
        for rank, batch in shards.items():
            distributed.rank = rank
            loss = model(**batch).loss / len(shards)
            loss.backward()
            print(f"step {step} rank {rank}: loss {loss.item():.4f}")
        optimizer.step()
