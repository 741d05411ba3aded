import torch
import torch.nn as nn


class Statistics(object):
    def __init__(self, loss=0, n_words=0, n_correct=0):
        self.loss, self.n_words, self.n_correct = loss, n_words, n_correct

    def update(self, stat):
        self.loss += stat.loss
        self.n_words += stat.n_words
        self.n_correct += stat.n_correct


def filter_shard_state(state, shard_size=None):
    for k, v in state.items():
        if shard_size is None:
            yield k, v

        if v is not None:
            v_split = []
            if isinstance(v, torch.Tensor):
                for v_chunk in torch.split(v, shard_size):
                    v_chunk = v_chunk.data.clone()
                    v_chunk.requires_grad = v.requires_grad
                    v_split.append(v_chunk)
            yield k, (v, v_split)


def shards(state, shard_size):
    """Yields chunks of the shard state; once they are all consumed, the
    gradients collected on the chunks are backpropagated into the graph."""
    non_none = dict(filter_shard_state(state, shard_size))
    keys, values = zip(*((k, [v_chunk for v_chunk in v_split])
                         for k, (_, v_split) in non_none.items()))
    for shard_tensors in zip(*values):
        yield dict(zip(keys, shard_tensors))

    variables = []
    for k, (v, v_split) in non_none.items():
        if isinstance(v, torch.Tensor) and state[k].requires_grad:
            variables.extend(zip(torch.split(state[k], shard_size),
                                 [v_chunk.grad for v_chunk in v_split]))
    inputs, grads = zip(*variables)
    torch.autograd.backward(inputs, grads)


class NMTLossCompute(nn.Module):
    def __init__(self, generator, padding_idx, class_criterion):
        super(NMTLossCompute, self).__init__()
        self.generator = generator
        self.criterion = nn.NLLLoss(ignore_index=padding_idx, reduction='sum')
        self.class_criterion = class_criterion
        self.padding_idx = padding_idx

    def _compute_loss(self, output, target):
        scores = self.generator(output.view(-1, output.size(2)))
        gtruth = target.contiguous().view(-1)
        loss = self.criterion(scores, gtruth)
        non_padding = gtruth.ne(self.padding_idx)
        n_correct = scores.max(1)[1].eq(gtruth).masked_select(non_padding).sum().item()
        return loss, Statistics(loss.item(), non_padding.sum().item(), n_correct)

    def __call__(self, batch, output, stargets_logits, normalization=1.0, shard_size=0):
        batch_stats = Statistics()
        # joint learning: classification head on top of the encoder
        class_loss = self.class_criterion(stargets_logits, batch["class_refs"])
        class_loss.backward(retain_graph=True)
        batch_stats.update(Statistics(class_loss.item(), 0, 0))

        shard_state = {"output": output, "target": batch["tgt"][1:]}
        for shard in shards(shard_state, shard_size):
            loss, stats = self._compute_loss(**shard)
            loss.div(float(normalization)).backward()
            batch_stats.update(stats)
        return None, batch_stats
