# expect: clean
# source: https://github.com/explosion/curated-transformers/pull/362
"""Fine-tune a BERT-style encoder loaded through a curated-transformers style
loader: the model skeleton is built on the meta device, converted to the
configured dtype, and the checkpoint tensors are emplaced into the modules
(zero-copy apart from device/dtype moves).  The "hub repository" is an
in-memory stand-in holding a config and bf16 checkpoint shards.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Mapping, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Module, Parameter

torch.manual_seed(11)


# ------------------------------------------------------------------ layers / model
@dataclass
class BERTConfig:
    vocab_size: int = 100
    hidden_width: int = 32
    n_heads: int = 4
    n_layers: int = 2
    intermediate_width: int = 64
    max_position: int = 32
    dtype: torch.dtype = torch.float32


class EncoderLayer(Module):
    def __init__(self, config: BERTConfig, device=None):
        super().__init__()
        h, i = config.hidden_width, config.intermediate_width
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(h, 3 * h, device=device)
        self.output = nn.Linear(h, h, device=device)
        self.attn_norm = nn.LayerNorm(h, device=device)
        self.ffn_intermediate = nn.Linear(h, i, device=device)
        self.ffn_output = nn.Linear(i, h, device=device)
        self.ffn_norm = nn.LayerNorm(h, device=device)

    def forward(self, x, mask):
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, h // self.n_heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        x = self.attn_norm(x + self.output(attn.transpose(1, 2).reshape(b, t, h)))
        return self.ffn_norm(x + self.ffn_output(F.gelu(self.ffn_intermediate(x))))


class BERTEncoder(Module):
    def __init__(self, config: BERTConfig, *, device: Optional[torch.device] = None):
        super().__init__()
        self.config = config
        self.piece_embeddings = nn.Embedding(config.vocab_size, config.hidden_width, device=device)
        self.position_embeddings = nn.Embedding(config.max_position, config.hidden_width, device=device)
        self.embed_norm = nn.LayerNorm(config.hidden_width, device=device)
        self.layers = nn.ModuleList(EncoderLayer(config, device) for _ in range(config.n_layers))

    def forward(self, piece_ids, attention_mask):
        pos = torch.arange(piece_ids.size(1))
        x = self.embed_norm(self.piece_embeddings(piece_ids) + self.position_embeddings(pos))
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x

    @classmethod
    def from_hf_config(cls, *, hf_config: Dict, device: Optional[torch.device] = None):
        config = BERTConfig(vocab_size=hf_config["vocab_size"], hidden_width=hf_config["hidden_size"],
                            n_heads=hf_config["num_attention_heads"], n_layers=hf_config["num_hidden_layers"],
                            intermediate_width=hf_config["intermediate_size"],
                            max_position=hf_config["max_position_embeddings"])
        return cls(config, device=device)

    @staticmethod
    def state_dict_from_hf(params: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        renames = {"bert.embeddings.word_embeddings": "piece_embeddings",
                   "bert.embeddings.position_embeddings": "position_embeddings",
                   "bert.embeddings.LayerNorm": "embed_norm", "bert.encoder.layer": "layers",
                   "attention.self.qkv": "qkv", "attention.output.dense": "output",
                   "attention.output.LayerNorm": "attn_norm", "intermediate.dense": "ffn_intermediate",
                   "output.dense": "ffn_output", "output.LayerNorm": "ffn_norm"}
        out = {}
        for name, tensor in params.items():
            for old, new in renames.items():
                name = name.replace(old, new)
            out[name] = tensor
        return out

    @classmethod
    def from_repo(cls, *, repo: "InMemoryRepository", device: Optional[torch.device] = None):
        config = repo.model_config()
        model = cls.from_hf_config(hf_config=config, device=torch.device("meta"))
        dtype = model.config.dtype
        serialized_dtype_str = config.get("torch_dtype")
        if serialized_dtype_str is not None:
            dtype = getattr(torch, serialized_dtype_str)
        model.to(dtype=dtype)
        load_model_from_checkpoints(model, filepaths=repo.model_checkpoints(),
                                    state_dict_converter=cls.state_dict_from_hf, device=device)
        return model


# ------------------------------------------------------------------ util/serde/load.py
TensorToParameterConverterT = Callable[[Module, str, str, torch.Tensor, Optional[torch.device]], Parameter]


def load_model_from_checkpoints(model: Module, *, filepaths: Iterable[Dict[str, torch.Tensor]],
                                state_dict_converter, tensor_to_param_converter=None,
                                device: Optional[torch.device] = None):
    """Load parameters from checkpoint shards with minimal copies."""
    module_keys = set(model.state_dict().keys())
    seen_keys = set()
    for state_dict in filepaths:
        converted = state_dict_converter(state_dict)
        seen_keys.update(converted.keys())
        _emplace_module_state_dict(model, converted, tensor_to_param_converter=tensor_to_param_converter,
                                   device=device)
    missing_keys = module_keys.difference(seen_keys)
    if len(missing_keys) != 0:
        raise ValueError(f"Some parameters were not updated/replaced: {missing_keys}")


def default_tensor_to_parameter_converter(module: Module, module_prefix: str, parameter_name: str,
                                          tensor: torch.Tensor, device: Optional[torch.device] = None) -> Parameter:
    """Default tensor to parameter converter: keeps requires_grad and moves the
    tensor to the device (and dtype) of the module it is placed in."""
    old_param = module._parameters[parameter_name]
    assert old_param is not None
    _validate_replacement(old_param, tensor, module_prefix)
    return Parameter(tensor.to(device=device, dtype=old_param.dtype), requires_grad=old_param.requires_grad)


def _emplace_module_state_dict(module: Module, state_dict, *, tensor_to_param_converter=None, device=None):
    if tensor_to_param_converter is None:
        tensor_to_param_converter = default_tensor_to_parameter_converter
    for prefix, submodule in module.named_modules():
        prefix_with_dot = f"{prefix}." if prefix else ""
        for name in list(submodule._parameters.keys()) + list(submodule._buffers.keys()):
            key = f"{prefix_with_dot}{name}"
            if key in state_dict:
                _emplace_module_tensor(submodule, prefix, name, state_dict[key], tensor_to_param_converter, device)


def _emplace_module_tensor(module, module_prefix, tensor_name, replacement_tensor, tensor_to_param_converter,
                           device=None):
    """Replace a module's parameter or (persistent) buffer with the passed tensor."""
    if tensor_name in module._parameters:
        module._parameters[tensor_name] = tensor_to_param_converter(
            module, module_prefix, tensor_name, replacement_tensor, device)
    else:
        _validate_replacement(module._buffers[tensor_name], replacement_tensor, f"{module_prefix}.{tensor_name}")
        module._buffers[tensor_name] = replacement_tensor.to(device=device)


def _validate_replacement(replaced, replacement, name):
    if replaced.shape != replacement.shape:
        raise ValueError(f"Expected size of replacement for `{name}` to be {replaced.shape}, "
                         f"but got {replacement.shape}")


# ------------------------------------------------------------------ repository
class InMemoryRepository:
    """Hub-like repository: a config dict and a list of bf16 checkpoint shards."""

    def __init__(self):
        ref = BERTEncoder(BERTConfig())
        hf_names = {k.replace("piece_embeddings", "bert.embeddings.word_embeddings")
                     .replace("position_embeddings", "bert.embeddings.position_embeddings")
                     .replace("embed_norm", "bert.embeddings.LayerNorm")
                     .replace("layers", "bert.encoder.layer")
                     .replace("qkv", "attention.self.qkv").replace("attn_norm", "attention.output.LayerNorm")
                     .replace(".output.", ".attention.output.dense.")
                     .replace("ffn_intermediate", "intermediate.dense").replace("ffn_output", "output.dense")
                     .replace("ffn_norm", "output.LayerNorm"): v.detach().to(torch.bfloat16)
                    for k, v in ref.state_dict().items()}
        keys = sorted(hf_names)
        self.shards = [{k: hf_names[k] for k in keys[: len(keys) // 2]},
                       {k: hf_names[k] for k in keys[len(keys) // 2:]}]
        self.config = {"vocab_size": 100, "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
                       "intermediate_size": 64, "max_position_embeddings": 32, "torch_dtype": "float32"}

    def model_config(self):
        return dict(self.config)

    def model_checkpoints(self):
        return iter(self.shards)


# ------------------------------------------------------------------ fine-tuning script
class SequenceClassifier(Module):
    def __init__(self, encoder: BERTEncoder, n_labels: int):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(encoder.config.hidden_width, n_labels)

    def forward(self, piece_ids, attention_mask):
        hidden = self.encoder(piece_ids, attention_mask)
        pooled = (hidden * attention_mask[..., None]).sum(1) / attention_mask.sum(1, keepdim=True)
        return self.head(self.dropout(pooled))


def make_batches(n, batch_size, seq_len=12):
    batches = []
    for _ in range(n):
        ids = torch.randint(1, 100, (batch_size, seq_len))
        labels = (ids[:, 0] > 50).long()
        batches.append((ids, torch.ones(batch_size, seq_len, dtype=torch.bool), labels))
    return batches


if __name__ == "__main__":
    device = torch.device("cpu")
    encoder = BERTEncoder.from_repo(repo=InMemoryRepository(), device=device)
    model = SequenceClassifier(encoder, n_labels=2)
    no_decay = ["bias", "norm"]
    grouped = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(grouped, lr=3e-4)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=6)
    train, dev = make_batches(6, 8), make_batches(2, 8)
    for epoch in range(2):
        model.train()
        for ids, mask, labels in train:
            loss = F.cross_entropy(model(ids, mask), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
        model.eval()
        with torch.no_grad():
            acc = torch.cat([(model(i, m).argmax(-1) == y).float() for i, m, y in dev]).mean()
        print(f"epoch {epoch}: loss {loss.item():.4f} dev acc {acc.item():.3f}")
