# expect: no_grad_fn
# source: https://github.com/jina-ai/finetuner/issues/435
"""Fine-tuning a pretrained CNN into an embedding model for product-image search.

Follows the tailor/tuner split of a metric-learning fine-tuning library: the tailor cuts
a classification backbone at a chosen embedding layer (everything after it becomes an
identity), optionally freezes the pretrained weights and optionally attaches a projection
head; the tuner trains the resulting embedding model with a triplet loss on labelled
catalogue images and reports retrieval metrics through callbacks.
"""
from collections import OrderedDict
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


def tiny_resnet(num_classes=100):
    """Stand-in for torchvision's resnet50 (same layer naming, far fewer channels)."""
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(3, 8, 3, 1, 1, bias=False)),
        ("bn1", nn.BatchNorm2d(8)),
        ("relu", nn.ReLU()),
        ("layer1", BasicBlock(8, 8)),
        ("layer2", BasicBlock(8, 16, stride=2)),
        ("avgpool", nn.AdaptiveAvgPool2d(1)),
        ("flatten", nn.Flatten()),
        ("fc", nn.Linear(16, num_classes)),
    ]))


class PytorchTailor:
    def __init__(self, model: nn.Module, input_size=(3, 16, 16)):
        self._model = model
        self._input_size = input_size

    @property
    def embedding_layers(self) -> List[Dict]:
        """Candidate embedding layers: modules whose output is a flat feature vector."""
        shapes = OrderedDict()
        hooks = []
        for name, module in self._model.named_children():
            hooks.append(module.register_forward_hook(
                lambda m, i, o, name=name: shapes.__setitem__(name, tuple(o.shape))))
        with torch.no_grad():
            self._model.eval()
            self._model(torch.zeros(2, *self._input_size))
        for h in hooks:
            h.remove()
        return [{"name": n, "output_features": s[1]} for n, s in shapes.items() if len(s) == 2]

    def _trim(self, layer_name: str):
        names = [n for n, _ in self._model.named_children()]
        if layer_name not in names:
            raise KeyError(f"`embedding_layer_name` must be one of {names}, given {layer_name}")
        cut = names.index(layer_name)
        for name in names[cut + 1:]:
            setattr(self._model, name, nn.Identity())

    def _attach_dense_layer(self, in_features: int, output_dim: int):
        return nn.Sequential(self._model, nn.Linear(in_features, output_dim, bias=True))

    def to_embedding_model(self, layer_name: Optional[str] = None, output_dim: Optional[int] = None,
                           freeze: bool = False) -> nn.Module:
        layers = {l["name"]: l for l in self.embedding_layers}
        if layer_name is None:
            layer_name = list(layers)[-1]
        in_features = layers[layer_name]["output_features"]
        self._trim(layer_name)
        if freeze:
            for param in self._model.parameters():
                param.requires_grad = False
        if output_dim:
            return self._attach_dense_layer(in_features, output_dim)
        return self._model


class TripletLoss(nn.Module):
    def __init__(self, margin=1.0):
        super().__init__()
        self.margin = margin

    def forward(self, anchor, positive, negative):
        anchor, positive, negative = (F.normalize(t, dim=-1) for t in (anchor, positive, negative))
        dist_pos = (anchor - positive).pow(2).sum(-1)
        dist_neg = (anchor - negative).pow(2).sum(-1)
        return F.relu(dist_pos - dist_neg + self.margin).mean()


class CatalogueDataset:
    def __init__(self, n_classes, per_class, size=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        protos = torch.randn(n_classes, 3, size, size, generator=g)
        self.images = protos.repeat_interleave(per_class, 0) + 0.3 * torch.randn(
            n_classes * per_class, 3, size, size, generator=g)
        self.labels = torch.arange(n_classes).repeat_interleave(per_class)
        self.rng = np.random.RandomState(seed)

    def triplets(self, batch_size, n_batches):
        labels = self.labels.numpy()
        for _ in range(n_batches):
            a = self.rng.randint(0, len(labels), size=batch_size)
            p = np.array([self.rng.choice(np.flatnonzero(labels == labels[i])) for i in a])
            n = np.array([self.rng.choice(np.flatnonzero(labels != labels[i])) for i in a])
            yield self.images[a], self.images[p], self.images[n]


class ProgressCallback:
    def on_epoch_end(self, tuner, epoch, logs):
        print(f"epoch {epoch}: " + "  ".join(f"{k}={v:.4f}" for k, v in logs.items()))


class PytorchTuner:
    def __init__(self, embed_model: nn.Module, loss: nn.Module, callbacks=None):
        self.embed_model = embed_model
        self.loss = loss
        self.callbacks = callbacks or []

    def _get_optimizer(self, learning_rate):
        return torch.optim.Adam(self.embed_model.parameters(), lr=learning_rate)

    def _train(self, data, optimizer, batch_size, steps):
        self.embed_model.train()
        losses = []
        for anchor, pos, neg in data.triplets(batch_size, steps):
            optimizer.zero_grad()
            embeddings = [self.embed_model(x) for x in (anchor, pos, neg)]
            loss = self.loss(*embeddings)
            loss.backward()  # raises
            optimizer.step()
            losses.append(loss.item())
        return float(np.mean(losses))

    @torch.no_grad()
    def _eval(self, data):
        self.embed_model.eval()
        emb = F.normalize(self.embed_model(data.images), dim=-1)
        sim = emb @ emb.t()
        sim.fill_diagonal_(-1.0)
        nearest = sim.argmax(dim=1)
        return (data.labels[nearest] == data.labels).float().mean().item()

    def fit(self, train_data, eval_data, epochs=2, batch_size=8, steps_per_epoch=4, learning_rate=1e-3):
        optimizer = self._get_optimizer(learning_rate)
        for epoch in range(epochs):
            train_loss = self._train(train_data, optimizer, batch_size, steps_per_epoch)
            logs = {"train_loss": train_loss, "eval_precision@1": self._eval(eval_data)}
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, logs)
        return self.embed_model


def fit(model, train_data, eval_data=None, to_embedding_model=True, layer_name=None,
        output_dim=None, freeze=False, loss="TripletLoss", **kwargs):
    if to_embedding_model:
        model = PytorchTailor(model).to_embedding_model(layer_name=layer_name, output_dim=output_dim,
                                                        freeze=freeze)
    loss_fn = {"TripletLoss": TripletLoss}[loss]()
    tuner = PytorchTuner(model, loss_fn, callbacks=[ProgressCallback()])
    return tuner.fit(train_data, eval_data or train_data, **kwargs)


def main():
    config = {
        "layer_name": "flatten",
        "output_dim": None,
        "freeze": True,
        "epochs": 2,
        "batch_size": 8,
        "learning_rate": 1e-3,
    }
    pretrained = tiny_resnet()
    train_data = CatalogueDataset(n_classes=6, per_class=6, seed=0)
    eval_data = CatalogueDataset(n_classes=6, per_class=3, seed=1)
    fit(pretrained, train_data, eval_data, **config)


if __name__ == "__main__":
    main()
