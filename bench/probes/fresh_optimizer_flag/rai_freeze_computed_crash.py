# expect: requires_grad_nonleaf
# source: https://github.com/mit-ll-responsible-ai/responsible-ai-toolbox/issues/24
import torch as tr
import torch.nn.functional as F


def flatten_params(items):
    if isinstance(items, tr.Tensor):
        yield items
        return
    for item in items:
        if isinstance(item, dict):
            yield from flatten_params(item["params"])
        else:
            yield from flatten_params(item)


def freeze(*items):
    param_states = {}
    for item in items:
        if isinstance(item, tr.nn.Module):
            item = item.parameters()
        elif isinstance(item, tr.optim.Optimizer):
            item = item.param_groups
        for param in flatten_params(item):
            if param not in param_states:
                param_states[param] = param.requires_grad
                param.requires_grad_(False)  # raises

    def restore_state():
        for p, requires_grad in param_states.items():
            p.requires_grad_(requires_grad)

    return restore_state


class frozen:
    def __init__(self, *items):
        self._items = items

    def __enter__(self):
        self._unfreeze = freeze(*self._items)

    def __exit__(self, type, value, traceback):
        self._unfreeze()


tr.manual_seed(0)
backbone = tr.nn.Sequential(tr.nn.Linear(10, 16), tr.nn.ReLU())
head = tr.nn.Linear(16, 3)
images = tr.randn(12, 10)
labels = tr.randint(0, 3, (12,))

feats = backbone(images)
delta = tr.zeros_like(feats, requires_grad=True)
optim = tr.optim.SGD([delta], lr=0.5)

with frozen(head, feats):
    for step in range(5):
        loss = -F.cross_entropy(head(feats + delta), labels)
        optim.zero_grad()
        loss.backward()
        optim.step()
        with tr.no_grad():
            delta.clamp_(-0.3, 0.3)
        print(step, -loss.item())

print("head still trainable:", all(p.requires_grad for p in head.parameters()))
