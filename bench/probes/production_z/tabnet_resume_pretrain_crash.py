# expect: nonscalar_backward
# source: https://github.com/mlverse/tabnet/issues/40
"""TabNet for tabular classification with self-supervised pretraining.

A TabNet pretrainer (masked-feature reconstruction) is trained first with
periodic checkpoints; supervised fitting then continues from a chosen pretraining
epoch (`from_epoch=`), mirroring the tabnet_pretrain()/tabnet_fit() workflow of
the R package, ported to Python.  Data is a synthetic attrition-style table.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def tabnet_config(**kwargs):
    cfg = dict(batch_size=64, epochs=2, learn_rate=2e-2, decision_width=8, attention_width=8,
               num_steps=3, lambda_sparse=1e-3, pretraining_ratio=0.5, checkpoint_epochs=1,
               momentum=0.02, loss="cross_entropy", verbose=True)
    cfg.update(kwargs)
    return cfg


class GLU(nn.Module):
    def __init__(self, inp, out):
        super().__init__()
        self.fc = nn.Linear(inp, 2 * out)
        self.bn = nn.BatchNorm1d(2 * out)

    def forward(self, x):
        return F.glu(self.bn(self.fc(x)), dim=-1)


class AttentiveTransformer(nn.Module):
    def __init__(self, inp, out):
        super().__init__()
        self.fc = nn.Linear(inp, out)
        self.bn = nn.BatchNorm1d(out)

    def forward(self, priors, processed):
        return torch.softmax(self.bn(self.fc(processed)) * priors, dim=-1)


class TabNetEncoder(nn.Module):
    def __init__(self, input_dim, n_d, n_a, n_steps, gamma=1.3):
        super().__init__()
        self.n_d, self.n_steps, self.gamma = n_d, n_steps, gamma
        self.initial_bn = nn.BatchNorm1d(input_dim)
        self.shared = GLU(input_dim, n_d + n_a)
        self.steps = nn.ModuleList([GLU(n_d + n_a, n_d + n_a) for _ in range(n_steps + 1)])
        self.att = nn.ModuleList([AttentiveTransformer(n_a, input_dim) for _ in range(n_steps)])

    def forward(self, x):
        x = self.initial_bn(x)
        priors = torch.ones_like(x)
        out = self.steps[0](self.shared(x))
        att = out[:, self.n_d:]
        steps_output, m_loss = [], 0.0
        for step in range(self.n_steps):
            mask = self.att[step](priors, att)
            m_loss = m_loss + torch.mean(torch.sum(-mask * torch.log(mask + 1e-10), dim=1))
            priors = priors * (self.gamma - mask)
            out = self.steps[step + 1](self.shared(mask * x))
            steps_output.append(F.relu(out[:, : self.n_d]))
            att = out[:, self.n_d:]
        return steps_output, m_loss / self.n_steps


class TabNetNoEmbeddings(nn.Module):
    """Supervised network: returns (logits, M_loss)."""

    def __init__(self, input_dim, output_dim, cfg):
        super().__init__()
        self.encoder = TabNetEncoder(input_dim, cfg["decision_width"], cfg["attention_width"], cfg["num_steps"])
        self.final_mapping = nn.Linear(cfg["decision_width"], output_dim)

    def forward(self, x):
        steps_output, m_loss = self.encoder(x)
        return self.final_mapping(torch.stack(steps_output).sum(0)), m_loss


class TabNetPretrainer(nn.Module):
    """Self-supervised network: returns (reconstruction, embedded_x, obf_vars)."""

    def __init__(self, input_dim, cfg):
        super().__init__()
        self.pretraining_ratio = cfg["pretraining_ratio"]
        self.encoder = TabNetEncoder(input_dim, cfg["decision_width"], cfg["attention_width"], cfg["num_steps"])
        self.decoder = nn.Sequential(nn.Linear(cfg["decision_width"], 16), nn.ReLU(), nn.Linear(16, input_dim))

    def forward(self, x):
        embedded_x = x
        obf_vars = torch.bernoulli(torch.full_like(x, self.pretraining_ratio))
        steps_output, _ = self.encoder((1 - obf_vars) * embedded_x)
        res = self.decoder(torch.stack(steps_output).sum(0))
        return res, embedded_x, obf_vars


def unsupervised_loss(y_pred, embedded_x, obf_vars, eps=1e-9):
    errors = y_pred - embedded_x
    batch_std = embedded_x.std(0) ** 2 + eps
    features_loss = ((errors * obf_vars) ** 2 / batch_std).sum(1) / (obf_vars.sum(1) + eps)
    return features_loss.mean()


class TabnetFit:
    def __init__(self, network, cfg):
        self.fit = dict(network=network, config=cfg, checkpoints=[], metrics=[])


class TabnetPretrain(TabnetFit):
    pass


def snapshot(network):
    return copy.deepcopy(network.state_dict()), type(network), network


def reload_model(checkpoint):
    state, cls, template = checkpoint
    net = copy.deepcopy(template)
    net.load_state_dict(state)
    return net


def batches(x, y, batch_size, gen):
    idx = torch.randperm(x.shape[0], generator=gen)
    for i in range(0, x.shape[0] - batch_size + 1, batch_size):
        j = idx[i:i + batch_size]
        yield x[j], (None if y is None else y[j])


def train_batch(network, optimizer, batch, cfg):
    x, y = batch
    out = network(x)
    loss = F.cross_entropy(out[0], y)
    loss = loss - cfg["lambda_sparse"] * out[1]
    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
    return loss.item()


def train_batch_un(network, optimizer, batch):
    x, _ = batch
    res, embedded_x, obf_vars = network(x)
    loss = unsupervised_loss(res, embedded_x, obf_vars)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def train_loop(model, x, y, cfg, step_fn, epoch_shift=0):
    network = model.fit["network"]
    optimizer = torch.optim.Adam(network.parameters(), lr=cfg["learn_rate"])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    gen = torch.Generator().manual_seed(epoch_shift)
    for epoch in range(epoch_shift + 1, epoch_shift + cfg["epochs"] + 1):
        network.train()
        losses = [step_fn(network, optimizer, b) for b in batches(x, y, cfg["batch_size"], gen)]
        model.fit["metrics"].append(float(np.mean(losses)))
        if epoch % cfg["checkpoint_epochs"] == 0:
            model.fit["checkpoints"].append(snapshot(network))
        scheduler.step()
        if cfg["verbose"]:
            print(f"[Epoch {epoch:03d}] Loss: {np.mean(losses):.6f}")
    return model


def model_pretrain_to_fit(pretrain, input_dim, output_dim, cfg):
    network = TabNetNoEmbeddings(input_dim, output_dim, cfg)
    network.encoder.load_state_dict(pretrain.fit["network"].encoder.state_dict())
    fit = TabnetFit(network, cfg)
    fit.fit["metrics"] = list(pretrain.fit["metrics"])
    return fit


def tabnet_bridge(x, y, config, tabnet_model=None, from_epoch=None, task="supervised"):
    input_dim = x.shape[1]
    epoch_shift = 0
    if task == "supervised":
        output_dim = int(y.max().item()) + 1
        if tabnet_model is None:
            tabnet_model = TabnetFit(TabNetNoEmbeddings(input_dim, output_dim, config), config)
        elif from_epoch is not None:
            # model must be loaded from checkpoint
            ckpt_epoch = tabnet_model.fit["config"]["checkpoint_epochs"]
            if from_epoch > len(tabnet_model.fit["checkpoints"]) * ckpt_epoch:
                raise ValueError(f"The model was trained for less than {from_epoch} epochs")
            closest_checkpoint = from_epoch // ckpt_epoch
            tabnet_model.fit["network"] = reload_model(tabnet_model.fit["checkpoints"][closest_checkpoint - 1])
            epoch_shift = closest_checkpoint * ckpt_epoch
        elif isinstance(tabnet_model, TabnetPretrain):
            # resume training from unsupervised
            tabnet_model = model_pretrain_to_fit(tabnet_model, input_dim, output_dim, config)
        tabnet_model.fit["config"] = config
        return train_loop(tabnet_model, x, y, config,
                          lambda n, o, b: train_batch(n, o, b, config), epoch_shift)
    pretrain = TabnetPretrain(TabNetPretrainer(input_dim, config), config)
    return train_loop(pretrain, x, None, config, train_batch_un)


def tabnet_pretrain(x, **kwargs):
    return tabnet_bridge(x, None, tabnet_config(**kwargs), task="unsupervised")


def tabnet_fit(x, y, tabnet_model=None, from_epoch=None, **kwargs):
    return tabnet_bridge(x, y, tabnet_config(**kwargs), tabnet_model, from_epoch)


def make_attrition(n=256, d=10, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    logits = x[:, 0] - 0.5 * x[:, 3] + 0.8 * x[:, 5] * x[:, 1]
    y = (logits + 0.3 * rng.normal(size=n) > 0).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    torch.manual_seed(0)
    x, y = make_attrition()
    pretrain = tabnet_pretrain(x, epochs=2, checkpoint_epochs=1)
    fit = tabnet_fit(x, y, tabnet_model=pretrain, from_epoch=1, epochs=1)
    fit.fit["network"].eval()
    with torch.no_grad():
        acc = (fit.fit["network"](x)[0].argmax(1) == y).float().mean().item()
    print(f"train accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
