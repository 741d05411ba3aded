# expect: clean
# source: https://github.com/learnables/learn2learn/issues/363
import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn, optim
from torch.func import functional_call


@dataclass
class ViTConfig:
    image_size: int = 16
    patch_size: int = 4
    num_channels: int = 3
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    num_labels: int = 5
    layer_norm_eps: float = 1e-12


class ViTEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        num_patches = (config.image_size // config.patch_size) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.hidden_size) * 0.02)
        self.projection = nn.Conv2d(config.num_channels, config.hidden_size, config.patch_size, config.patch_size)
        self.position_embeddings = nn.Parameter(torch.randn(1, num_patches + 1, config.hidden_size) * 0.02)

    def forward(self, pixel_values):
        x = self.projection(pixel_values).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.position_embeddings


class ViTLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.attn_out = nn.Linear(config.hidden_size, config.hidden_size)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states):
        B, N, C = hidden_states.shape
        qkv = self.qkv(self.layernorm_before(hidden_states)).view(B, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) / (C // self.num_heads) ** 0.5).softmax(dim=-1)
        hidden_states = hidden_states + self.attn_out((attn @ v).transpose(1, 2).reshape(B, N, C))
        return hidden_states + self.output(torch.nn.functional.gelu(self.intermediate(self.layernorm_after(hidden_states))))


class ViTPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class ViTModel(nn.Module):
    def __init__(self, config, add_pooling_layer=True):
        super().__init__()
        self.embeddings = ViTEmbeddings(config)
        self.encoder = nn.ModuleList([ViTLayer(config) for _ in range(config.num_hidden_layers)])
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.pooler = ViTPooler(config) if add_pooling_layer else None

    def forward(self, pixel_values):
        hidden_states = self.embeddings(pixel_values)
        for layer in self.encoder:
            hidden_states = layer(hidden_states)
        sequence_output = self.layernorm(hidden_states)
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return sequence_output, pooled_output


class ViTForFewShot(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.vit = ViTModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pixel_values):
        sequence_output, _ = self.vit(pixel_values)
        return self.classifier(sequence_output[:, 0, :])


class MAML(nn.Module):
    def __init__(self, model, lr, first_order=False, allow_unused=False, params=None):
        super().__init__()
        self.module = model
        self.lr = lr
        self.first_order = first_order
        self.allow_unused = allow_unused
        self.fast_params = params

    def clone(self):
        params = {n: p.clone() for n, p in self.module.named_parameters()}
        return MAML(self.module, self.lr, self.first_order, self.allow_unused, params=params)

    def forward(self, x):
        if self.fast_params is None:
            return self.module(x)
        return functional_call(self.module, self.fast_params, (x,))

    def adapt(self, loss, first_order=None, allow_unused=None):
        first_order = self.first_order if first_order is None else first_order
        allow_unused = self.allow_unused if allow_unused is None else allow_unused
        second_order = not first_order
        names, params = zip(*self.fast_params.items())
        gradients = torch.autograd.grad(loss, params, retain_graph=second_order,
                                        create_graph=second_order, allow_unused=allow_unused)
        self.fast_params = {n: p if g is None else p - self.lr * g for n, p, g in zip(names, params, gradients)}


def accuracy(predictions, targets):
    predictions = predictions.argmax(dim=1).view(targets.shape)
    return (predictions == targets).sum().float() / targets.size(0)


def sample_task(ways, shots, g):
    prototypes = torch.randn(ways, 3, 16, 16, generator=g)
    data = prototypes.repeat_interleave(2 * shots, dim=0) + 0.5 * torch.randn(ways * 2 * shots, 3, 16, 16, generator=g)
    labels = torch.arange(ways).repeat_interleave(2 * shots)
    return data, labels


def fast_adapt(batch, learner, loss, adaptation_steps, shots, ways, device):
    data, labels = batch
    data, labels = data.to(device), labels.to(device)
    adaptation_indices = np.zeros(data.size(0), dtype=bool)
    adaptation_indices[np.arange(shots * ways) * 2] = True
    evaluation_indices = torch.from_numpy(~adaptation_indices)
    adaptation_indices = torch.from_numpy(adaptation_indices)
    adaptation_data, adaptation_labels = data[adaptation_indices], labels[adaptation_indices]
    evaluation_data, evaluation_labels = data[evaluation_indices], labels[evaluation_indices]
    for step in range(adaptation_steps):
        adaptation_error = loss(learner(adaptation_data), adaptation_labels)
        learner.adapt(adaptation_error)
    predictions = learner(evaluation_data)
    evaluation_error = loss(predictions, evaluation_labels)
    evaluation_accuracy = accuracy(predictions, evaluation_labels)
    return evaluation_error, evaluation_accuracy


def main(ways=5, shots=2, meta_lr=0.003, fast_lr=0.5, meta_batch_size=4, adaptation_steps=1,
         num_iterations=3, seed=42):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    device = torch.device('cpu')

    model = ViTForFewShot(ViTConfig(num_labels=ways)).to(device)
    maml = MAML(model, lr=fast_lr, first_order=False, allow_unused=True)
    opt = optim.Adam(maml.parameters(), meta_lr)
    loss = nn.CrossEntropyLoss(reduction='mean')

    for iteration in range(num_iterations):
        opt.zero_grad()
        meta_train_error = 0.0
        meta_train_accuracy = 0.0
        for task in range(meta_batch_size):
            learner = maml.clone()
            batch = sample_task(ways, shots, g)
            evaluation_error, evaluation_accuracy = fast_adapt(batch, learner, loss, adaptation_steps,
                                                               shots, ways, device)
            evaluation_error.backward()
            meta_train_error += evaluation_error.item()
            meta_train_accuracy += evaluation_accuracy.item()
        print(f'Iteration {iteration}: meta train error {meta_train_error / meta_batch_size:.4f} '
              f'meta train accuracy {meta_train_accuracy / meta_batch_size:.4f}')
        for p in maml.parameters():
            if p.grad is not None:
                p.grad.data.mul_(1.0 / meta_batch_size)
        opt.step()


if __name__ == '__main__':
    main()
