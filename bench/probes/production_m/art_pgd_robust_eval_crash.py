# expect: no_grad_fn
# source: https://github.com/Trusted-AI/adversarial-robustness-toolbox/issues/498
"""Robustness evaluation of a small CNN with an ART-style toolkit: a
PyTorchClassifier estimator (numpy in / numpy out, preprocessing, batched
predict, loss_gradient), a FastGradientMethod / ProjectedGradientDescent
attack pair (random init, eps-ball projection, clip values), and a user
script that trains the model on synthetic 1x12x12 digits and then reports
clean and adversarial accuracy for a few epsilons.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)


# ------------------------------------------------------------------ art/estimators/classification/pytorch.py
class PyTorchClassifier:
    def __init__(self, model, loss, input_shape, nb_classes, optimizer=None, clip_values=(0.0, 1.0),
                 preprocessing=(0.0, 1.0), device_type="cpu"):
        self._model = model
        self._loss = loss
        self._input_shape = input_shape
        self._nb_classes = nb_classes
        self._optimizer = optimizer
        self.clip_values = clip_values
        self.preprocessing = preprocessing
        self._device = torch.device(device_type)

    @property
    def input_shape(self):
        return self._input_shape

    def _apply_preprocessing(self, x, y=None):
        mean, std = self.preprocessing
        x = ((x - mean) / std).astype(np.float32)
        if y is not None and y.ndim == 2:
            y = np.argmax(y, axis=1)
        return x, y

    def predict(self, x, batch_size=64):
        self._model.eval()
        x_preprocessed, _ = self._apply_preprocessing(x)
        results = []
        with torch.no_grad():
            for m in range(int(np.ceil(len(x_preprocessed) / batch_size))):
                batch = torch.from_numpy(x_preprocessed[m * batch_size:(m + 1) * batch_size]).to(self._device)
                results.append(self._model(batch).cpu().numpy())
        return np.concatenate(results)

    def fit(self, x, y, batch_size=64, nb_epochs=3):
        self._model.train()
        x_preprocessed, y_preprocessed = self._apply_preprocessing(x, y)
        num_batch = int(np.ceil(len(x_preprocessed) / batch_size))
        ind = np.arange(len(x_preprocessed))
        for _ in range(nb_epochs):
            np.random.shuffle(ind)
            for m in range(num_batch):
                idx = ind[m * batch_size:(m + 1) * batch_size]
                i_batch = torch.from_numpy(x_preprocessed[idx]).to(self._device)
                o_batch = torch.from_numpy(y_preprocessed[idx]).long().to(self._device)
                self._optimizer.zero_grad()
                loss = self._loss(self._model(i_batch), o_batch)
                loss.backward()
                self._optimizer.step()

    def loss_gradient(self, x, y, **kwargs):
        """Gradient of the loss w.r.t. x (numpy in, numpy out)."""
        x_preprocessed, y_preprocessed = self._apply_preprocessing(x, y)
        inputs_t = torch.from_numpy(x_preprocessed).to(self._device)
        inputs_t.requires_grad = True
        labels_t = torch.from_numpy(y_preprocessed).long().to(self._device)

        model_outputs = self._model(inputs_t)
        loss = self._loss(model_outputs, labels_t)

        # Clean gradients and compute the gradient w.r.t. the input
        self._model.zero_grad()
        loss.backward()  # raises
        grads = inputs_t.grad.cpu().numpy().copy()
        std = self.preprocessing[1]
        return grads / std


# ------------------------------------------------------------------ art/attacks/evasion
class FastGradientMethod:
    def __init__(self, estimator, norm=np.inf, eps=0.3, eps_step=0.1, targeted=False, num_random_init=0, batch_size=32):
        self.estimator = estimator
        self.norm, self.eps, self.eps_step = norm, eps, eps_step
        self.targeted, self.num_random_init, self.batch_size = targeted, num_random_init, batch_size

    def _compute_perturbation(self, batch, batch_labels):
        grad = self.estimator.loss_gradient(batch, batch_labels) * (1 - 2 * int(self.targeted))
        if self.norm == np.inf:
            grad = np.sign(grad)
        else:
            flat = grad.reshape(len(grad), -1)
            grad = (flat / (np.linalg.norm(flat, axis=1, keepdims=True) + 1e-12)).reshape(grad.shape)
        return grad

    def _apply_perturbation(self, batch, perturbation, eps_step):
        batch = batch + eps_step * perturbation
        if self.estimator.clip_values is not None:
            batch = np.clip(batch, *self.estimator.clip_values)
        return batch

    @staticmethod
    def _projection(values, eps, norm_p):
        if norm_p == np.inf:
            return np.clip(values, -eps, eps)
        flat = values.reshape(len(values), -1)
        factor = np.minimum(1.0, eps / (np.linalg.norm(flat, axis=1, keepdims=True) + 1e-12))
        return (flat * factor).reshape(values.shape)


class ProjectedGradientDescent(FastGradientMethod):
    def __init__(self, estimator, norm=np.inf, eps=0.3, eps_step=0.1, max_iter=10, num_random_init=1, batch_size=32):
        super().__init__(estimator, norm, eps, eps_step, False, num_random_init, batch_size)
        self.max_iter = max_iter

    def generate(self, x, y=None):
        if y is None:
            y = np.argmax(self.estimator.predict(x), axis=1)
        adv_x = x.astype(np.float32).copy()
        for start in range(0, len(x), self.batch_size):
            batch_x = x[start:start + self.batch_size]
            batch_y = y[start:start + self.batch_size]
            adv_batch = batch_x.copy()
            if self.num_random_init > 0:
                adv_batch = adv_batch + np.random.uniform(-self.eps, self.eps, adv_batch.shape).astype(np.float32)
                adv_batch = np.clip(adv_batch, *self.estimator.clip_values)
            for _ in range(self.max_iter):
                perturbation = self._compute_perturbation(adv_batch, batch_y)
                adv_batch = self._apply_perturbation(adv_batch, perturbation, self.eps_step)
                adv_batch = batch_x + self._projection(adv_batch - batch_x, self.eps, self.norm)
            adv_x[start:start + self.batch_size] = adv_batch
        return adv_x


# ------------------------------------------------------------------ user script
class SmallCNN(nn.Module):
    def __init__(self, nb_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 3 * 3, nb_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


@dataclass
class EvalConfig:
    n_train: int = 256
    n_test: int = 64
    nb_classes: int = 4
    epsilons: tuple = (0.1, 0.25)
    eps_step: float = 0.05
    max_iter: int = 5


def synthetic_digits(n, nb_classes):
    y = np.random.randint(0, nb_classes, size=n)
    x = np.random.rand(n, 1, 12, 12).astype(np.float32) * 0.4
    for i, c in enumerate(y):
        x[i, 0, 3 * c:3 * c + 3, :] += 0.3
    return np.clip(x, 0, 1), y


def main(cfg):
    x_train, y_train = synthetic_digits(cfg.n_train, cfg.nb_classes)
    x_test, y_test = synthetic_digits(cfg.n_test, cfg.nb_classes)
    model = SmallCNN(cfg.nb_classes)
    classifier = PyTorchClassifier(model=model, loss=nn.CrossEntropyLoss(), input_shape=(1, 12, 12),
                                   nb_classes=cfg.nb_classes,
                                   optimizer=torch.optim.Adam(model.parameters(), lr=1e-2), clip_values=(0.0, 1.0))
    classifier.fit(x_train, y_train, batch_size=64, nb_epochs=3)

    model.eval()
    with torch.no_grad():
        preds = np.argmax(classifier.predict(x_test), axis=1)
        print(f"clean accuracy: {np.mean(preds == y_test):.3f}")
        for eps in cfg.epsilons:
            attack = ProjectedGradientDescent(classifier, norm=np.inf, eps=eps, eps_step=cfg.eps_step,
                                              max_iter=cfg.max_iter, batch_size=32)
            x_test_adv = attack.generate(x=x_test, y=y_test)
            adv_preds = np.argmax(classifier.predict(x_test_adv), axis=1)
            print(f"eps={eps}: adversarial accuracy {np.mean(adv_preds == y_test):.3f}")


if __name__ == "__main__":
    main(EvalConfig())
