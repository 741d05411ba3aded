# expect: clean
# shape: callbacks kept in a `defaultdict(list)` by trigger name and called with `getattr(callback, trigger)(...)`; the image logger detaches the prediction before `.numpy()`
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn


class CallbackEngine:
    END_OF_ITERATION = "end_of_iteration"

    def __init__(self):
        self._registry = defaultdict(list)

    def register(self, callback, trigger):
        self._registry[trigger].append(callback)

    def call(self, trigger, **kwargs):
        for callback in self._registry[trigger]:
            getattr(callback, trigger)(**kwargs)


class ImageLogger:
    def __init__(self):
        self.images = []

    def end_of_iteration(self, trainer):
        batch = trainer.state["prediction"].detach().numpy()
        self.images.append(np.clip(batch, 0, 1).mean())


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.callbacks = CallbackEngine()
        self.state = {}

    def fit(self, x, steps):
        for _ in range(steps):
            self.optimizer.zero_grad()
            prediction = torch.sigmoid(self.model(x))
            loss = ((prediction - x) ** 2).mean()
            loss.backward()
            self.optimizer.step()
            self.state["prediction"] = prediction
            self.callbacks.call(CallbackEngine.END_OF_ITERATION, trainer=self)


torch.manual_seed(0)
trainer = Trainer(nn.Linear(4, 4))
trainer.callbacks.register(ImageLogger(), CallbackEngine.END_OF_ITERATION)
trainer.fit(torch.rand(8, 4), steps=2)
