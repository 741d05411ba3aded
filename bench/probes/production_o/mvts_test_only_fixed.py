# expect: clean
# source: https://github.com/gzerveas/mvts_transformer/issues/24
"""mvts_transformer (Zerveas et al.) regression on a synthetic multivariate
time-series set: train with validation, save the best model, then re-run
``main`` with ``--test_only testset --load_model ...`` as in the issue.

Layout follows src/models/ts_transformer.py, src/running.py and src/main.py.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
np.random.seed(0)

CHECKPOINTS = {}  # stands in for experiments/<name>/checkpoints/model_best.pth


# ------------------------------------------------------------ models/ts_transformer.py
class LearnablePositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=1024):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.pe = nn.Parameter(torch.empty(max_len, 1, d_model))
        nn.init.uniform_(self.pe, -0.02, 0.02)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TSTransformerEncoderClassiregressor(nn.Module):
    def __init__(self, feat_dim, max_len, d_model, n_heads, num_layers, dim_feedforward,
                 num_classes, dropout=0.1, pos_encoding='learnable'):
        super().__init__()
        self.max_len = max_len
        self.d_model = d_model
        self.project_inp = nn.Linear(feat_dim, d_model)
        self.pos_enc = LearnablePositionalEncoding(d_model, dropout=dropout, max_len=max_len)
        encoder_layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layer, num_layers)
        self.act = nn.GELU()
        self.dropout1 = nn.Dropout(dropout)
        self.feat_dim = feat_dim
        self.num_classes = num_classes
        self.output_layer = nn.Linear(d_model * max_len, num_classes)

    def forward(self, X, padding_masks):
        inp = X.permute(1, 0, 2)
        inp = self.project_inp(inp) * math.sqrt(self.d_model)
        inp = self.pos_enc(inp)
        output = self.transformer_encoder(inp, src_key_padding_mask=~padding_masks)
        output = self.act(output)
        output = output.permute(1, 0, 2)
        output = self.dropout1(output)
        output = output * padding_masks.unsqueeze(-1)
        output = output.reshape(output.shape[0], -1)
        return self.output_layer(output)


# ------------------------------------------------------------ datasets
class ClassiregressionDataset(Dataset):
    def __init__(self, n_samples, seq_len, feat_dim, seed):
        rng = np.random.RandomState(seed)
        self.X = rng.randn(n_samples, seq_len, feat_dim).astype(np.float32)
        self.y = (self.X[:, -4:, 0].mean(axis=1, keepdims=True) + 0.1 * rng.randn(n_samples, 1)).astype(np.float32)
        self.IDs = list(range(n_samples))

    def __getitem__(self, ind):
        return torch.from_numpy(self.X[ind]), torch.from_numpy(self.y[ind]), self.IDs[ind]

    def __len__(self):
        return len(self.IDs)


def collate_superv(data, max_len=None):
    features, labels, IDs = zip(*data)
    lengths = [X.shape[0] for X in features]
    X = torch.zeros(len(features), max_len, features[0].shape[-1])
    for i in range(len(features)):
        end = min(lengths[i], max_len)
        X[i, :end, :] = features[i][:end, :]
    targets = torch.stack(labels, dim=0)
    padding_masks = torch.arange(max_len)[None, :] < torch.tensor(lengths)[:, None]
    return X, targets, padding_masks, IDs


def get_loss_module(config):
    return nn.MSELoss(reduction='none')  # outputs loss for each batch sample


# ------------------------------------------------------------ running.py
def evaluate(evaluator):
    """Perform a single, one-off evaluation on an evaluator object (initialized with a dataset)"""
    eval_start_time = time.time()
    with torch.no_grad():
        aggr_metrics, per_batch = evaluator.evaluate(epoch_num=None, keep_all=True)
    print('Evaluation runtime: {:.2f} s'.format(time.time() - eval_start_time))
    return aggr_metrics, per_batch


def validate(val_evaluator, config, best_metrics, best_value, epoch):
    """Run an evaluation on the validation set while logging metrics, and handle outcome"""
    with torch.no_grad():
        aggr_metrics, per_batch = val_evaluator.evaluate(epoch, keep_all=True)
    if aggr_metrics['loss'] < best_value:
        best_value = aggr_metrics['loss']
        CHECKPOINTS['model_best.pth'] = {k: v.clone() for k, v in val_evaluator.model.state_dict().items()}
        best_metrics = aggr_metrics.copy()
    return aggr_metrics, best_metrics, best_value


class BaseRunner(object):
    def __init__(self, model, dataloader, device, loss_module, optimizer=None, l2_reg=None,
                 print_interval=10):
        self.model = model
        self.dataloader = dataloader
        self.device = device
        self.optimizer = optimizer
        self.loss_module = loss_module
        self.l2_reg = l2_reg
        self.print_interval = print_interval
        self.epoch_metrics = {}

    def print_callback(self, i_batch, metrics, prefix=''):
        total_batches = len(self.dataloader)
        dyn = ' | '.join('{}: {:.4f}'.format(k, v) for k, v in metrics.items())
        print('{} {:5.1f}% | batch: {} of {} | {}'.format(prefix, 100 * i_batch / total_batches,
                                                           i_batch, total_batches, dyn))


class SupervisedRunner(BaseRunner):

    def train_epoch(self, epoch_num=None):
        self.model = self.model.train()
        epoch_loss, total_samples = 0, 0
        for i, batch in enumerate(self.dataloader):
            X, targets, padding_masks, IDs = batch
            predictions = self.model(X.to(self.device), padding_masks)
            loss = self.loss_module(predictions, targets)  # (batch_size,) loss for each sample
            batch_loss = torch.sum(loss)
            mean_loss = batch_loss / len(loss)
            self.optimizer.zero_grad()
            mean_loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=4.0)
            self.optimizer.step()
            if i % self.print_interval == 0:
                self.print_callback(i, {"loss": mean_loss.item()}, prefix='Training Epoch {} '.format(epoch_num))
            with torch.no_grad():
                total_samples += len(loss)
                epoch_loss += batch_loss.item()
        self.epoch_metrics['epoch'] = epoch_num
        self.epoch_metrics['loss'] = epoch_loss / total_samples
        return self.epoch_metrics

    def evaluate(self, epoch_num=None, keep_all=True):
        self.model = self.model.eval()
        epoch_loss, total_samples = 0, 0
        per_batch = {'target_masks': [], 'targets': [], 'predictions': [], 'metrics': [], 'IDs': []}
        for i, batch in enumerate(self.dataloader):
            X, targets, padding_masks, IDs = batch
            predictions = self.model(X.to(self.device), padding_masks)
            loss = self.loss_module(predictions, targets)
            batch_loss = torch.sum(loss).cpu().item()
            mean_loss = batch_loss / len(loss)

            per_batch['targets'].append(targets.cpu().numpy())
            per_batch['predictions'].append(predictions.cpu().numpy())
            per_batch['metrics'].append([loss.cpu().numpy()])
            per_batch['IDs'].append(IDs)

            total_samples += len(loss)
            epoch_loss += batch_loss
        self.epoch_metrics['epoch'] = epoch_num
        self.epoch_metrics['loss'] = epoch_loss / total_samples
        if keep_all:
            return self.epoch_metrics, per_batch
        return self.epoch_metrics


# ------------------------------------------------------------ main.py
def main(config):
    device = torch.device('cpu')
    train_data = ClassiregressionDataset(48, config['max_seq_len'], config['feat_dim'], seed=1)
    val_data = ClassiregressionDataset(16, config['max_seq_len'], config['feat_dim'], seed=2)
    test_data = ClassiregressionDataset(16, config['max_seq_len'], config['feat_dim'], seed=3)

    model = TSTransformerEncoderClassiregressor(config['feat_dim'], config['max_seq_len'], config['d_model'],
                                                config['num_heads'], config['num_layers'],
                                                config['dim_feedforward'], num_classes=1,
                                                dropout=config['dropout'])
    optimizer = torch.optim.RAdam(model.parameters(), lr=config['lr'])
    if config['load_model']:
        model.load_state_dict(CHECKPOINTS[config['load_model']])
    model.to(device)
    loss_module = get_loss_module(config)
    collate_fn = collate_superv

    if config['test_only'] == 'testset':  # Only evaluate and skip training
        test_loader = DataLoader(dataset=test_data, batch_size=config['batch_size'], shuffle=False,
                                 collate_fn=lambda x: collate_fn(x, max_len=model.max_len))
        test_evaluator = SupervisedRunner(model, test_loader, device, loss_module,
                                          print_interval=config['print_interval'])
        aggr_metrics_test, per_batch_test = evaluate(test_evaluator)
        print('Test Summary: ' + ' | '.join('{}: {}'.format(k, v) for k, v in aggr_metrics_test.items()))
        return

    train_loader = DataLoader(train_data, batch_size=config['batch_size'], shuffle=True,
                              collate_fn=lambda x: collate_fn(x, max_len=model.max_len))
    val_loader = DataLoader(val_data, batch_size=config['batch_size'], shuffle=False,
                            collate_fn=lambda x: collate_fn(x, max_len=model.max_len))
    trainer = SupervisedRunner(model, train_loader, device, loss_module, optimizer,
                               print_interval=config['print_interval'])
    val_evaluator = SupervisedRunner(model, val_loader, device, loss_module,
                                     print_interval=config['print_interval'])
    best_value, best_metrics = 1e16, {}
    for epoch in range(1, config['epochs'] + 1):
        trainer.train_epoch(epoch)
        aggr_metrics_val, best_metrics, best_value = validate(val_evaluator, config, best_metrics,
                                                              best_value, epoch)
        print('Epoch {} validation loss {:.4f}'.format(epoch, aggr_metrics_val['loss']))
    print('Best loss was {:.4f}'.format(best_value))


config = dict(task='regression', feat_dim=3, max_seq_len=12, d_model=16, num_heads=2, num_layers=1,
              dim_feedforward=32, dropout=0.1, lr=1e-3, batch_size=8, epochs=2, print_interval=4,
              load_model=None, test_only=None)
main(config)
# python src/main.py ... --test_only testset --load_model ./experiments/.../model_best.pth
main(dict(config, load_model='model_best.pth', test_only='testset'))
