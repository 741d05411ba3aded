# expect: clean
# shape: an encoder helper returns the embeddings of the sentences it kept as a tuple, or an empty tuple when it kept none; the first embedding is exported through numpy, detached: an empty tuple indexed would raise first, so the embedding exported is the tensor
import torch
import torch.nn as nn

encoder = nn.Embedding(50, 8)


def embed_kept(batch):
    kept = [ids for ids in batch if int(ids.sum()) > 0]
    if not kept:
        return ()
    return tuple(encoder(ids).mean(0) for ids in kept)


vectors = embed_kept(torch.randint(1, 50, (3, 5)))
first = vectors[0]
print(first.detach().numpy().shape)
