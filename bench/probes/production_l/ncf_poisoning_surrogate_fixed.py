# expect: clean
# source: https://github.com/graytowne/revisit_adv_rec/issues/5
"""Data-poisoning attack on a recommender (revisit_adv_rec layout): fake users'
interaction rows are optimised so that target items get recommended.  The
adversarial gradient comes from a surrogate model trained on real + fake data
with the last epochs unrolled (differentiable SGD), here with a NeuralCF
surrogate.  Interactions are a small synthetic implicit-feedback matrix.
"""
import time
from collections import OrderedDict
from functools import partial
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

torch.manual_seed(1)
np.random.seed(1)
EPSILON = 1e-12


# ------------------------------------------------------------------ trainers/losses.py
bce_loss = nn.BCELoss(reduction="none")


def mult_ce_loss(data, logits):
    """Multi-class cross-entropy loss."""
    log_probs = F.log_softmax(logits, dim=-1)
    loss = -log_probs * data
    return loss.sum(1) / (data.sum(1) + EPSILON)


def binary_ce_loss(data, logits):
    return bce_loss(torch.sigmoid(logits), data).mean(1)


def sampled_bce_loss(logits, n_negatives):
    """Binary-class cross-entropy loss with sampled negatives."""
    pos_logits, neg_logits = torch.split(logits, [1, n_negatives], 1)
    data = torch.cat([torch.ones_like(pos_logits), torch.zeros_like(neg_logits)], 1)
    return bce_loss(torch.sigmoid(logits), data).mean(1)


# ------------------------------------------------------------------ utils
def minibatch(tensor, batch_size=128):
    for i in range(0, len(tensor), batch_size):
        yield tensor[i:i + batch_size]


def tensor2ids(tensor):
    """Positive (user, item) pairs of an interaction matrix."""
    rows, cols = np.nonzero(tensor.detach().cpu().numpy())
    return rows, cols


# ------------------------------------------------------------------ trainers/ncf_trainer.py
class NeuralCF(nn.Module):
    def __init__(self, n_users, n_items, model_args):
        super(NeuralCF, self).__init__()
        self.n_dims = model_args.hidden_dims
        self.n_factor = model_args.num_factors
        self.emb_user_mf = nn.Embedding(n_users, self.n_factor)
        self.emb_item_mf = nn.Embedding(n_items, self.n_factor)
        self.emb_user_mlp = nn.Embedding(n_users, int(self.n_dims[0] / 2))
        self.emb_item_mlp = nn.Embedding(n_items, int(self.n_dims[0] / 2))
        self.mlp_layers = [('fc%d' % i, nn.Linear(self.n_dims[i], self.n_dims[i + 1]))
                           for i in range(len(self.n_dims) - 1)]
        self.mlp_params = nn.Sequential(OrderedDict(self.mlp_layers))
        self.last_fc = nn.Linear(self.n_factor + self.n_dims[-1], 1)

    def forward(self, user_ids, item_ids):
        emb_user_mf = self.emb_user_mf(user_ids)
        emb_item_mf = self.emb_item_mf(item_ids)
        emb_user_mlp = self.emb_user_mlp(user_ids)
        emb_item_mlp = self.emb_item_mlp(item_ids)
        mf_output = torch.mul(emb_user_mf, emb_item_mf)
        mlp_output = torch.cat([emb_user_mlp.expand_as(emb_item_mlp), emb_item_mlp], dim=-1)
        for layer in self.mlp_params:
            mlp_output = torch.relu(layer(mlp_output))
        output = self.last_fc(torch.cat((mf_output, mlp_output), dim=-1))
        return output.squeeze(-1)

    def predict_all(self, n_users, n_items):
        users = torch.arange(n_users)[:, None]
        items = torch.arange(n_items)[None, :].expand(n_users, n_items)
        return self.forward(users, items)


class NCFTrainer:
    def __init__(self, n_users, n_items, args):
        self.args = args
        self.n_users, self.n_items = n_users, n_items

    def _initialize(self):
        model_args = SimpleNamespace(**self.args.model)
        self._n_negatives = model_args.n_negatives
        self.net = NeuralCF(self.n_users, self.n_items, model_args)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.args.lr, weight_decay=self.args.l2)
        self.loss_func = partial(sampled_bce_loss, n_negatives=self._n_negatives)

    def _sample_negative(self, user_ids, pos_item_ids, n_negatives):
        samples = np.random.randint(0, self.n_items, size=(len(user_ids), n_negatives))
        return np.concatenate([pos_item_ids[:, None], samples], axis=1)

    def _batches(self, data_tensor):
        users, items = tensor2ids(data_tensor)
        idx = np.random.permutation(len(users))
        for b in minibatch(idx, self.args.batch_size):
            u = torch.as_tensor(users[b])[:, None]
            i = torch.as_tensor(self._sample_negative(users[b], items[b], self._n_negatives))
            yield u, i

    def fit_adv(self, data_tensor, epoch_num, unroll_steps, n_fakes, target_items):
        self._initialize()
        if not data_tensor.requires_grad:
            raise ValueError("To compute adversarial gradients, data_tensor should have requires_grad=True.")
        target_tensor = torch.zeros_like(data_tensor)
        target_tensor[:, target_items] = 1.0
        model = self.net

        for i in range(1, epoch_num - unroll_steps + 1):
            model.train()
            epoch_loss = 0.0
            for user_ids, item_ids in self._batches(data_tensor):
                loss = self.loss_func(model(user_ids, item_ids)).mean()
                epoch_loss += loss.item()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            print("Training, epoch: {}, loss: {:.4f}".format(i, epoch_loss))

        # Unrolled (differentiable) epochs: plain SGD on a functional copy of the weights.
        # The loss must read the interaction values from data_tensor (full rows as
        # pointwise targets, as WMFTrainer.fit_adv_sgd does) so that the adversarial
        # gradient can flow back to the fake users' rows.
        fparams = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
        all_items = torch.arange(self.n_items)[None, :]
        for i in range(epoch_num - unroll_steps + 1, epoch_num + 1):
            for batch_idx in minibatch(np.random.permutation(self.n_users), self.args.batch_size):
                user_ids = torch.as_tensor(batch_idx)[:, None]
                logits = functional_call(model, fparams, (user_ids, all_items.expand(len(batch_idx), -1)))
                loss = binary_ce_loss(data=data_tensor[batch_idx], logits=logits).mean()
                grads = torch.autograd.grad(loss, list(fparams.values()), create_graph=True)
                fparams = {k: p - self.args.lr * g for (k, p), g in zip(fparams.items(), grads)}
            print("Training (unrolled), epoch: {}".format(i))

        predictions = functional_call(model, fparams, (torch.arange(self.n_users)[:, None],
                                                       torch.arange(self.n_items)[None, :].expand(self.n_users, -1)))
        adv_loss = mult_ce_loss(logits=predictions[:-n_fakes], data=target_tensor[:-n_fakes]).sum()
        adv_grads = torch.autograd.grad(adv_loss, data_tensor)[0]
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(fparams[k])
        return adv_loss.item(), adv_grads[-n_fakes:]


# ------------------------------------------------------------------ trainers/adv_trainer.py
class BlackBoxAdvTrainer:
    def __init__(self, n_users, n_items, args):
        self.args = args
        self.n_users, self.n_items = n_users, n_items
        self.n_fakes = args.n_fakes
        self.target_items = args.target_items

    def _initialize(self, train_data):
        fake = (torch.rand(self.n_fakes, self.n_items) < self.args.fake_density).float()
        self.fake_tensor = fake.requires_grad_()
        self.optimizer = torch.optim.SGD([self.fake_tensor], lr=self.args.adv_lr, momentum=self.args.adv_momentum)

    def train_epoch(self, train_data, epoch_num):
        def _compute_adv_grads():
            sur_args = SimpleNamespace(**self.args.surrogate)
            sur_trainer_ = sur_args.trainer_class(n_users=self.n_users + self.n_fakes,
                                                  n_items=self.n_items, args=sur_args)
            data_tensor = torch.cat([train_data, self.fake_tensor.detach().clone()], dim=0)
            data_tensor.requires_grad_()
            adv_loss_, adv_grads_ = sur_trainer_.fit_adv(
                data_tensor=data_tensor, epoch_num=sur_args.epochs, unroll_steps=self.args.unroll_steps,
                n_fakes=self.n_fakes, target_items=self.target_items)
            return sur_trainer_, adv_loss_, adv_grads_

        def _project_tensor(fake_tensor, threshold=0.5):
            return torch.where(fake_tensor > threshold, torch.ones_like(fake_tensor), torch.zeros_like(fake_tensor))

        t1 = time.time()
        self.optimizer.zero_grad()
        sur_trainer, adv_loss, adv_grads = _compute_adv_grads()
        if self.args.click_targets:
            adv_grads[:, self.target_items] = 0.0
        print("Adversarial training [{:.1f} s], epoch: {}, loss: {:.4f}".format(time.time() - t1, epoch_num, adv_loss))

        normalized_adv_grads = adv_grads / (adv_grads.norm(p=2, dim=1, keepdim=True) + EPSILON)
        self.fake_tensor.grad = normalized_adv_grads.detach()
        self.optimizer.step()

        new_fake_tensor = _project_tensor(self.fake_tensor.data.clone(), threshold=self.args.proj_threshold)
        if self.args.click_targets:
            new_fake_tensor[:, self.target_items] = 1.0
        return sur_trainer, new_fake_tensor

    def fit(self, train_data):
        self._initialize(train_data)
        for epoch in range(1, self.args.adv_epochs + 1):
            _, new_fake_tensor = self.train_epoch(train_data, epoch)
            self.fake_tensor.data = new_fake_tensor
            print("fake users' mean clicks on targets:",
                  self.fake_tensor.data[:, self.target_items].mean().item())


if __name__ == "__main__":
    n_users, n_items = 30, 20
    train_data = (torch.rand(n_users, n_items) < 0.15).float()
    args = SimpleNamespace(
        n_fakes=3, target_items=[4, 11], unroll_steps=1, adv_lr=1.0, adv_momentum=0.9,
        proj_threshold=0.5, click_targets=True, fake_density=0.2, adv_epochs=2,
        surrogate={"trainer_class": NCFTrainer, "epochs": 3, "lr": 1e-2, "l2": 1e-6, "batch_size": 32,
                   "model": {"model_type": "NeuralCF", "hidden_dims": [16, 8], "num_factors": 8,
                             "n_negatives": 4}})
    adv_trainer = BlackBoxAdvTrainer(n_users=n_users, n_items=n_items, args=args)
    adv_trainer.fit(train_data)
