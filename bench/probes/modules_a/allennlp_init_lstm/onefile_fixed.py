# expect: clean
# source: https://github.com/allenai/allennlp/issues/2239
"""LSTM sentence classifier (embedding -> LSTM -> linear) whose LSTM and
projection weights are initialised through an AllenNLP-style
InitializerApplicator with the uniform_unit_scaling initialiser, then trained
on synthetic token sequences labelled by which half of the vocabulary they use
most."""
"""
An initializer is just a PyTorch function.
Here we implement a proxy class that allows us
to register them and supply any additional function arguments
(for example, the ``mean`` and ``std`` of a normal initializer)
as named arguments to the constructor.
"""
import logging
import math
import re
from typing import List, Tuple

import torch
import torch.nn.init

logger = logging.getLogger(__name__)  # pylint: disable=invalid-name


def uniform_unit_scaling(tensor: torch.Tensor, nonlinearity: str = "linear"):
    """
    An initaliser which preserves output variance for approximately gaussian
    distributed inputs. This boils down to initialising layers using a uniform
    distribution in the range ``(-sqrt(3/dim[0]) * scale, sqrt(3 / dim[0]) * scale)``, where
    ``dim[0]`` is equal to the input dimension of the parameter and the ``scale``
    is a constant scaling factor which depends on the non-linearity used.

    Returns
    -------
    The initialised tensor.
    """
    size = 1.
    # Estimate the input size. This won't work perfectly,
    # but it covers almost all use cases where this initialiser
    # would be expected to be useful, i.e in large linear and
    # convolutional layers, as the last dimension will almost
    # always be the output size.
    for dimension in list(tensor.size())[:-1]:
        size *= dimension

    activation_scaling = torch.nn.init.calculate_gain(nonlinearity, tensor)
    max_value = math.sqrt(3 / size) * activation_scaling

    return tensor.data.uniform_(-max_value, max_value)


class InitializerApplicator:
    """
    Applies initializers to the parameters of a Module based on regex matches.  Any parameter not
    explicitly matching a regex will not be initialized, instead using whatever the default
    initialization was in the module's code.
    """
    def __init__(self, initializers: List[Tuple[str, callable]] = None) -> None:
        self._initializers = initializers or []

    def __call__(self, module: torch.nn.Module) -> None:
        logger.info("Initializing parameters")
        unused_regexes = set([initializer[0] for initializer in self._initializers])
        uninitialized_parameters = set()
        # Store which initialisers were applied to which parameters.
        for name, parameter in module.named_parameters():
            for initializer_regex, initializer in self._initializers:
                if re.search(initializer_regex, name):
                    logger.info("Initializing %s using %s intitializer", name, initializer_regex)
                    initializer(parameter)
                    unused_regexes.discard(initializer_regex)
                    break
            else:  # no break
                uninitialized_parameters.add(name)
        for regex in unused_regexes:
            logger.warning("Did not use initialization regex that was passed: %s", regex)
        for name in sorted(uninitialized_parameters):
            logger.info("   %s", name)


import torch
import torch.nn as nn
import torch.nn.functional as F


torch.manual_seed(0)
VOCAB, EMB, HID = 50, 16, 32


class LstmClassifier(nn.Module):
    def __init__(self, initializer: InitializerApplicator = InitializerApplicator()):
        super().__init__()
        self.embedder = nn.Embedding(VOCAB, EMB)
        self.encoder = nn.LSTM(EMB, HID, batch_first=True)
        self.projection = nn.Linear(HID, 2)
        initializer(self)

    def forward(self, tokens):
        _, (h, _) = self.encoder(self.embedder(tokens))
        return self.projection(h[-1])


def make_batch(batch_size=16, seq_len=12):
    tokens = torch.randint(0, VOCAB, (batch_size, seq_len))
    labels = ((tokens < VOCAB // 2).float().mean(1) > 0.5).long()
    return tokens, labels


applicator = InitializerApplicator([
    ("encoder.*weight", uniform_unit_scaling),
    ("projection.weight", uniform_unit_scaling),
])
model = LstmClassifier(initializer=applicator)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for step in range(5):
    tokens, labels = make_batch()
    loss = F.cross_entropy(model(tokens), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
