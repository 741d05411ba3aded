# expect: inplace_version
# source: https://github.com/Rose-STL-Lab/torchTS/issues/50
"""DCRNN seq2seq traffic forecaster (torchts graph.py / dcrnn.py / model.py, condensed).

Encoder-decoder of DCGRU cells over a sensor graph with curriculum learning; a small
Trainer stands in for the Lightning loop.  The reset/update gates are fully connected.
"""
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
np.random.seed(0)


# ----------------------------------------------------------------- utils/graph.py
def normalized_laplacian(adj):
    d = np.array(adj.sum(1)).flatten()
    d_mat_inv_sqrt = np.diag(np.power(d, -0.5, where=d > 0, out=np.zeros_like(d)))
    return np.eye(adj.shape[0]) - d_mat_inv_sqrt @ adj @ d_mat_inv_sqrt


def random_walk(adj_mx):
    d = np.array(adj_mx.sum(1)).flatten()
    return np.diag(np.power(d, -1.0, where=d > 0, out=np.zeros_like(d))) @ adj_mx


def scaled_laplacian(adj_mx, lambda_max=2):
    L = normalized_laplacian(np.maximum.reduce([adj_mx, adj_mx.T]))
    if lambda_max is None:
        lambda_max = np.linalg.eigvalsh(L).max()
    return ((2 / lambda_max * L) - np.eye(L.shape[0])).astype(np.float32)


def sparse_matrix(L):
    rows, cols = np.nonzero(L)
    return torch.sparse_coo_tensor(np.stack([rows, cols]), L[rows, cols].astype(np.float32), L.shape).coalesce()


def concat(a, b):
    return torch.cat([a, b.unsqueeze(0)], dim=0)


class StandardScaler:
    def __init__(self, data):
        self.mean, self.std = data.mean(), data.std()

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return (data * self.std) + self.mean


# ----------------------------------------------------------------- nn/graph.py
class DCGRUCell(nn.Module):
    def __init__(self, num_units, adj_mx, max_diffusion_step, num_nodes, input_dim,
                 activation=torch.tanh, filter_type="laplacian", use_gc_for_ru=True):
        super().__init__()
        self._activation, self._num_nodes, self._num_units = activation, num_nodes, num_units
        self._max_diffusion_step, self._use_gc_for_ru = max_diffusion_step, use_gc_for_ru

        supports = []
        if filter_type == "laplacian":
            supports.append(scaled_laplacian(adj_mx, lambda_max=None))
        elif filter_type == "random_walk":
            supports.append(random_walk(adj_mx).T)
        elif filter_type == "dual_random_walk":
            supports += [random_walk(adj_mx).T, random_walk(adj_mx.T).T]
        else:
            supports.append(scaled_laplacian(adj_mx))
        self._supports = [sparse_matrix(s) for s in supports]

        num_matrices = len(supports) * self._max_diffusion_step + 1
        input_size_gconv = (self._num_units + input_dim) * num_matrices
        if self._use_gc_for_ru:
            input_size_ru = input_size_gconv
        else:
            input_size_ru = self._num_units + input_dim

        self._ru_weights = nn.Parameter(nn.init.xavier_normal_(torch.empty(input_size_ru, 2 * num_units)))
        self._ru_biases = nn.Parameter(torch.full((2 * num_units,), 1.0))
        self._gconv_weights = nn.Parameter(nn.init.xavier_normal_(torch.empty(input_size_gconv, num_units)))
        self._gconv_biases = nn.Parameter(torch.zeros(num_units))

    def forward(self, inputs, hx):
        fn = self._gconv if self._use_gc_for_ru else self._fc
        output_size = 2 * self._num_units
        value = torch.sigmoid(fn(inputs, hx, output_size, bias_start=1.0, reset=True))
        value = torch.reshape(value, (-1, self._num_nodes, output_size))
        r, u = torch.split(tensor=value, split_size_or_sections=self._num_units, dim=-1)
        r = torch.reshape(r, (-1, self._num_nodes * self._num_units))
        u = torch.reshape(u, (-1, self._num_nodes * self._num_units))
        c = self._activation(self._gconv(inputs, r * hx, self._num_units))
        return u * hx + (1.0 - u) * c

    def _fc(self, inputs, state, output_size, bias_start=0.0, reset=True):
        batch_size = inputs.shape[0]
        shape = (batch_size * self._num_nodes, -1)
        inputs_and_state = torch.cat([torch.reshape(inputs, shape), torch.reshape(state, shape)], dim=-1)

        value = torch.sigmoid(torch.matmul(inputs_and_state, self._ru_weights))
        value += self._ru_biases

        return value

    def _gconv(self, inputs, state, output_size, bias_start=0.0, reset=False):
        batch_size = inputs.shape[0]
        shape = (batch_size, self._num_nodes, -1)
        x = torch.cat([torch.reshape(inputs, shape), torch.reshape(state, shape)], dim=2)
        input_size = x.size(2)

        x0 = torch.reshape(x.permute(1, 2, 0), shape=[self._num_nodes, input_size * batch_size])
        x = torch.unsqueeze(x0, 0)
        if self._max_diffusion_step > 0:
            for support in self._supports:
                x1 = torch.sparse.mm(support, x0)
                x = concat(x, x1)
                for _ in range(2, self._max_diffusion_step + 1):
                    x2 = 2 * torch.sparse.mm(support, x1) - x0
                    x = concat(x, x2)
                    x1, x0 = x2, x1

        num_matrices = len(self._supports) * self._max_diffusion_step + 1
        x = torch.reshape(x, shape=[num_matrices, self._num_nodes, input_size, batch_size]).permute(3, 1, 2, 0)
        x = torch.reshape(x, shape=[batch_size * self._num_nodes, input_size * num_matrices])
        weights, biases = (self._ru_weights, self._ru_biases) if reset else (self._gconv_weights, self._gconv_biases)
        x = torch.matmul(x, weights) + biases
        return torch.reshape(x, [batch_size, self._num_nodes * output_size])


class DCGRU(nn.Module):
    def __init__(self, num_layers, num_units, adj_mx, max_diffusion_step, num_nodes, input_dim,
                 activation=torch.tanh, filter_type="laplacian", use_gc_for_ru=True):
        super().__init__()
        self.layers = nn.ModuleList(
            DCGRUCell(num_units, adj_mx, max_diffusion_step, num_nodes,
                      input_dim if i == 0 else num_units, filter_type=filter_type,
                      use_gc_for_ru=use_gc_for_ru)
            for i in range(num_layers))

    def forward(self, inputs, hidden_state):
        hidden_states, output = [], inputs
        for i, layer in enumerate(self.layers):
            output = layer(output, hidden_state[i])
            hidden_states.append(output)
        return output, torch.stack(hidden_states)


# ----------------------------------------------------------------- nn/model.py
class TimeSeriesModel(nn.Module):
    """Base class for all TorchTS models (the Lightning hooks, run by `Trainer` below)."""

    def __init__(self, optimizer, optimizer_args=None, criterion=F.mse_loss,
                 scheduler=None, scheduler_args=None, scaler=None):
        super().__init__()
        self.criterion, self.scaler = criterion, scaler
        self.optimizer = partial(optimizer, **optimizer_args) if optimizer_args else optimizer
        self.scheduler = partial(scheduler, **scheduler_args) if scheduler and scheduler_args else scheduler
        self.current_epoch = 0

    def _step(self, batch, batch_idx, num_batches):
        x, y = self.prepare_batch(batch)
        batches_seen = batch_idx + self.current_epoch * num_batches if self.training else batch_idx
        pred = self(x, y, batches_seen)
        if self.scaler is not None:
            y = self.scaler.inverse_transform(y)
            pred = self.scaler.inverse_transform(pred)
        return self.criterion(pred, y)

    def training_step(self, batch, batch_idx, num_batches):
        return self._step(batch, batch_idx, num_batches)

    validation_step = training_step

    def configure_optimizers(self):
        optimizer = self.optimizer(self.parameters())
        if self.scheduler is not None:
            return [optimizer], [self.scheduler(optimizer)]
        return [optimizer], []


# ----------------------------------------------------------------- nn/models/dcrnn.py
class Encoder(nn.Module):
    def __init__(self, input_dim, seq_len, **kwargs):
        super().__init__()
        self.input_dim, self.seq_len = input_dim, seq_len
        self.dcgru = DCGRU(input_dim=self.input_dim, **kwargs)

    def forward(self, inputs, hidden_state):
        return self.dcgru(inputs, hidden_state)


class Decoder(nn.Module):
    def __init__(self, output_dim, horizon, **kwargs):
        super().__init__()
        self.output_dim, self.horizon = output_dim, horizon
        self.num_nodes, self.num_units = kwargs["num_nodes"], kwargs["num_units"]
        self.dcgru = DCGRU(input_dim=self.output_dim, **kwargs)
        self.projection_layer = nn.Linear(self.num_units, self.output_dim)

    def forward(self, inputs, hidden_state):
        output, hidden = self.dcgru(inputs, hidden_state)
        projected = self.projection_layer(output.view(-1, self.num_units))
        return projected.view(-1, self.num_nodes * self.output_dim), hidden


class DCRNN(TimeSeriesModel):
    def __init__(self, adj_mx, num_units, seq_len=1, horizon=1, input_dim=1, output_dim=1,
                 max_diffusion_step=2, filter_type="laplacian", num_nodes=1, num_layers=1,
                 use_gc_for_ru=True, use_curriculum_learning=False, cl_decay_steps=1000, **kwargs):
        super().__init__(**kwargs)
        dcgru_args = {"adj_mx": adj_mx, "num_nodes": num_nodes, "num_layers": num_layers,
                      "num_units": num_units, "max_diffusion_step": max_diffusion_step,
                      "filter_type": filter_type, "use_gc_for_ru": use_gc_for_ru}
        self.encoder_model = Encoder(input_dim, seq_len, **dcgru_args)
        self.decoder_model = Decoder(output_dim, horizon, **dcgru_args)
        self.num_nodes, self.num_layers, self.hidden_state_size = num_nodes, num_layers, num_nodes * num_units
        self.use_curriculum_learning, self.cl_decay_steps = use_curriculum_learning, cl_decay_steps

    def _compute_sampling_threshold(self, batches_seen):
        return self.cl_decay_steps / (self.cl_decay_steps + np.exp(batches_seen / self.cl_decay_steps))

    def encoder(self, inputs):
        encoder_hidden_state = torch.zeros(self.num_layers, inputs.size(1), self.hidden_state_size)
        for t in range(self.encoder_model.seq_len):
            _, encoder_hidden_state = self.encoder_model(inputs[t], encoder_hidden_state)
        return encoder_hidden_state

    def decoder(self, encoder_hidden_state, labels=None, batches_seen=None):
        decoder_input = torch.zeros(encoder_hidden_state.size(1), self.num_nodes * self.decoder_model.output_dim)
        decoder_hidden_state, outputs = encoder_hidden_state, []
        for t in range(self.decoder_model.horizon):
            decoder_output, decoder_hidden_state = self.decoder_model(decoder_input, decoder_hidden_state)
            decoder_input = decoder_output
            outputs.append(decoder_output)
            if self.training and self.use_curriculum_learning:
                if np.random.uniform(0, 1) < self._compute_sampling_threshold(batches_seen):
                    decoder_input = labels[t]
        return torch.stack(outputs)

    def forward(self, inputs, labels=None, batches_seen=None):
        return self.decoder(self.encoder(inputs), labels, batches_seen=batches_seen)

    def prepare_batch(self, batch):
        x, y = (t.permute(1, 0, 2, 3) for t in batch)
        batch_size = x.size(1)
        x = x.reshape(self.encoder_model.seq_len, batch_size, self.num_nodes * self.encoder_model.input_dim)
        y = y[..., : self.decoder_model.output_dim].reshape(
            self.decoder_model.horizon, batch_size, self.num_nodes * self.decoder_model.output_dim)
        return x, y


class Trainer:
    def __init__(self, max_epochs=2, gradient_clip_val=5.0):
        self.max_epochs, self.gradient_clip_val = max_epochs, gradient_clip_val

    def fit(self, model, train_loader, val_loader):
        [optimizer], schedulers = model.configure_optimizers()
        for epoch in range(self.max_epochs):
            model.train(); model.current_epoch = epoch
            for batch_idx, batch in enumerate(train_loader):
                optimizer.zero_grad()
                loss = model.training_step(batch, batch_idx, len(train_loader))
                loss.backward()  # raises
                nn.utils.clip_grad_norm_(model.parameters(), self.gradient_clip_val)
                optimizer.step()
            [scheduler.step() for scheduler in schedulers]
            model.eval()
            with torch.no_grad():
                val = [model.validation_step(b, i, len(val_loader)).item() for i, b in enumerate(val_loader)]
            print(f"epoch {epoch}: train_loss={loss.item():.4f} val_loss={np.mean(val):.4f}")


# ----------------------------------------------------------------- examples/dcrnn/main.py
num_nodes, seq_len, horizon = 6, 4, 3
adj_mx = (np.random.rand(num_nodes, num_nodes) < 0.4).astype(np.float32) * np.random.rand(num_nodes, num_nodes)
np.fill_diagonal(adj_mx, 1.0)
speed = np.sin(np.linspace(0, 12, 200))[:, None] + 0.1 * np.random.randn(200, num_nodes)
tod = (np.arange(200) % 24 / 24.0)[:, None].repeat(num_nodes, 1)
series = np.stack([speed, tod], axis=-1).astype(np.float32)  # (T, N, 2)
scaler = StandardScaler(series[..., 0])
series[..., 0] = scaler.transform(series[..., 0])
x_all = torch.from_numpy(np.stack([series[i:i + seq_len] for i in range(48)]))
y_all = torch.from_numpy(np.stack([series[i + seq_len:i + seq_len + horizon] for i in range(48)]))
train_loader = list(zip(x_all[:32].split(8), y_all[:32].split(8)))
val_loader = list(zip(x_all[32:].split(8), y_all[32:].split(8)))

model_config = {"cl_decay_steps": 2000, "filter_type": "dual_random_walk", "horizon": horizon,
                "input_dim": 2, "max_diffusion_step": 2, "num_nodes": num_nodes, "num_layers": 2,
                "output_dim": 1, "num_units": 16, "seq_len": seq_len, "use_curriculum_learning": True,
                "use_gc_for_ru": False}
model = DCRNN(adj_mx, scaler=None, optimizer=torch.optim.Adam, optimizer_args={"lr": 0.01},
              scheduler=torch.optim.lr_scheduler.MultiStepLR,
              scheduler_args={"milestones": [20, 30], "gamma": 0.1}, **model_config)
Trainer(max_epochs=2).fit(model, train_loader, val_loader)
