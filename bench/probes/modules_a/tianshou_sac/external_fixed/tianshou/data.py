import numpy as np


class Batch(object):
    """The internal data structure to pass any kind of data to other methods."""
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __len__(self):
        return len(next(iter(self.__dict__.values())))

    def __getitem__(self, index):
        return Batch(**{k: v[index] for k, v in self.__dict__.items()})

    def sample(self, batch_size):
        indice = np.random.choice(len(self), batch_size)
        return self[indice], indice
