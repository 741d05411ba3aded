# expect: clean
# source: https://github.com/modelscope/ms-swift/issues/5132
"""LoRA supervised fine-tuning of a small vision-language model (ms-swift layout).

The ViT and the aligner are frozen, the language model's embeddings are
frozen and LoRA adapters sit on q/v projections.  Gradient checkpointing
(reentrant) is enabled, so the trainer calls enable_input_require_grads(),
which registers a forward hook on the embedding layer.  The template's
post-encode step merges image features into inputs_embeds; pure-text samples
still touch the vision tower with a zero-weighted term so that all ranks see
the same graph.  Mixed image / text synthetic dataset, CPU only.
"""
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class TrainArguments:
    vocab_size: int = 300
    hidden_size: int = 32
    num_layers: int = 2
    image_token_id: int = 299
    lora_rank: int = 4
    lora_alpha: int = 8
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    freeze_vit: bool = True
    freeze_aligner: bool = True
    gradient_checkpointing: bool = True
    learning_rate: float = 1e-3
    num_train_epochs: int = 1
    warmup_steps: int = 1


class LoraLinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling


class DecoderLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, h):
        x = self.ln1(h)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        mask = torch.ones(h.shape[1], h.shape[1], dtype=torch.bool).tril()
        att = (q @ k.transpose(1, 2) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1)
        h = h + self.o_proj(att @ v)
        return h + self.mlp(self.ln2(h))


class LanguageModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args.hidden_size) for _ in range(args.num_layers))
        self.norm = nn.LayerNorm(args.hidden_size)
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.gradient_checkpointing = False

    def forward(self, inputs_embeds):
        h = inputs_embeds
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(layer, h, use_reentrant=True)
            else:
                h = layer(h)
        return self.lm_head(self.norm(h))


class VisionModel(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 8, 8)
        self.blocks = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))

    def forward(self, pixel_values):
        x = self.patch(pixel_values).flatten(2).transpose(1, 2)
        return self.blocks(x)


class VLChatModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.vision_model = VisionModel(args.hidden_size)
        self.mlp1 = nn.Sequential(nn.LayerNorm(args.hidden_size), nn.Linear(args.hidden_size, args.hidden_size))
        self.language_model = LanguageModel(args)

    def get_input_embeddings(self):
        return self.language_model.embed_tokens

    def enable_input_require_grads(self):
        def make_inputs_require_grads(module, input, output):
            output.requires_grad_(True)
        self._require_grads_hook = self.get_input_embeddings().register_forward_hook(make_inputs_require_grads)

    def gradient_checkpointing_enable(self):
        self.language_model.gradient_checkpointing = True

    def extract_feature(self, pixel_values):
        return self.mlp1(self.vision_model(pixel_values))


class Template:
    def __init__(self, model, image_token_id):
        self.model = model
        self.image_token_id = image_token_id
        self.dummy_pixel = torch.zeros(1, 3, 16, 16)

    def _post_encode(self, inputs):
        input_ids = inputs["input_ids"]
        inputs_embeds = self.model.get_input_embeddings()(input_ids)
        pixel_values = inputs.get("pixel_values")
        if pixel_values is not None:
            image_embeds = self.model.extract_feature(pixel_values)
            image_mask = (input_ids == self.image_token_id).unsqueeze(-1).expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds.reshape(-1))
        else:
            image_embeds = self.model.extract_feature(self.dummy_pixel)
            inputs_embeds = inputs_embeds + image_embeds.mean() * 0.
        return {"inputs_embeds": inputs_embeds, "labels": inputs["labels"]}


def prepare_model(model, args):
    for name, module in list(model.language_model.named_modules()):
        for target in args.target_modules:
            if hasattr(module, target):
                setattr(module, target, LoraLinear(getattr(module, target), args.lora_rank, args.lora_alpha))
    for n, p in model.named_parameters():
        p.requires_grad = "lora_" in n
    if not args.freeze_vit:
        model.vision_model.requires_grad_(True)
    if not args.freeze_aligner:
        model.mlp1.requires_grad_(True)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model


def build_dataset(args, n=6, seq=12):
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        ids = torch.randint(1, args.vocab_size - 1, (1, seq), generator=g)
        row = {"input_ids": ids, "labels": ids.clone()}
        if i % 3 != 2:
            ids[0, 1:5] = args.image_token_id
            row["labels"][0, 1:5] = -100
            row["pixel_values"] = torch.randn(1, 3, 16, 16, generator=g)
        rows.append(row)
    return rows


class Seq2SeqTrainer:
    def __init__(self, model, template, args, train_dataset):
        self.model, self.template, self.args, self.train_dataset = model, template, args, train_dataset
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=args.learning_rate)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / (args.warmup_steps + 1)))
        self.state = {"global_step": 0, "log_history": []}

    def compute_loss(self, inputs):
        enc = self.template._post_encode(inputs)
        logits = self.model.language_model(enc["inputs_embeds"])
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), enc["labels"][:, 1:].reshape(-1),
                               ignore_index=-100)

    def training_step(self, inputs):
        self.model.train()
        loss = self.compute_loss(inputs)
        loss.backward()
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
        return loss.detach()

    def train(self):
        for epoch in range(self.args.num_train_epochs):
            for inputs in self.train_dataset:
                loss = self.training_step(inputs)
                self.state["global_step"] += 1
                self.state["log_history"].append({"loss": loss.item(), "step": self.state["global_step"]})
                print("step %d loss %.4f" % (self.state["global_step"], loss.item()))


def sft_main():
    torch.manual_seed(0)
    args = TrainArguments()
    model = prepare_model(VLChatModel(args), args)
    template = Template(model, args.image_token_id)
    Seq2SeqTrainer(model, template, args, build_dataset(args)).train()


if __name__ == "__main__":
    sft_main()
