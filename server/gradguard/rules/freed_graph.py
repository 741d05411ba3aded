"""GG001: backward through a graph an earlier backward already freed."""
from __future__ import annotations

from gradguard import fixes
from gradguard.facts import Facts, position
from gradguard.findings import Related
from gradguard.rules.base import Rule


class FreedGraph(Rule):
    """
    ## What it does
    Flags a `backward()` (or `torch.autograd.grad`, `scaler.scale(loss).backward()`,
    `accelerator.backward(loss)`, ...) whose graph runs through a part that an earlier
    backward already freed: the same loss backpropagated twice, a value computed before a
    loop (or on the previous iteration: an RNN hidden state, a tensor cached on `self`)
    reused by every iteration's backward, or two losses sharing a subgraph (a GAN's
    discriminator and generator steps) where the first backward frees the shared part.

    ## Why is this bad?
    To save memory, `backward()` releases the tensors each graph node saved for the
    gradient computation unless `retain_graph=True` is passed. The next backward that
    reaches those nodes raises `RuntimeError: Trying to backward through the graph a
    second time (or directly access saved tensors after they have already been freed)`,
    usually on the second loop iteration, with a traceback that points at `backward()`
    rather than at the value that carried the old graph.

    ## Example
    ```python
    h = torch.zeros(1, 8)
    for x, y in batches:
        out, h = rnn(x, h)           # h carries last iteration's graph
        loss = F.mse_loss(out, y)
        loss.backward()              # second iteration: the old graph was freed
        opt.step()
    ```

    ## Use instead
    Cut the graph where the value crosses into the next iteration (or into the other
    loss) with `.detach()`, compute values that need no gradient under
    `torch.no_grad()`, or — only when both backward passes really need gradients
    through the shared part — keep it with `retain_graph=True` on the first backward:
    ```python
    h = torch.zeros(1, 8)
    for x, y in batches:
        h = h.detach()
        out, h = rnn(x, h)
        loss = F.mse_loss(out, y)
        loss.backward()
        opt.step()
    ```

    ## Fix safety
    Unsafe: every fix changes which gradients flow or what memory is held. `.detach()` and
    `torch.no_grad()` stop gradients reaching what they cut; `retain_graph=True` keeps the
    graph in memory (and is offered only when no `optimizer.step()` would break it, or
    together with moving that step after the second backward). Where a value lives across
    iterations the fix detaches it where it crosses: at the top of the iteration, where it
    is stored on an object (`self.queue = torch.cat([keys, ...]).detach()`) or in a
    container, or where the previous value comes back (`self.rnn(x, self.hidden.detach())`).
    A lazily filled cache (`if self._cache is None: self._cache = ...`) holding a graph is
    computed on every call instead. A value built before the loop is rebuilt in every
    iteration when an optimizer in the loop
    trains what built it, else built under `torch.no_grad()`. Each offered fix has been
    applied and analysed again: its error is gone and no other appeared.
    """

    code = "GG001"
    name = "freed-graph-backward"
    predicts = "freed_graph"
    severity = "error"
    summary = "backward() reaches a part of the graph that an earlier backward already freed"

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x ** 2
y.sum().backward(retain_graph=True)
y.sum().backward()
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
y = (x * 2).sum()
y.backward(retain_variables=True)  # torch < 0.4's keyword: a TypeError now, before any backward runs
y.backward()
""",
        """
import torch
import torch.nn as nn
rnn = nn.RNN(4, 8)
opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
h = torch.zeros(1, 1, 8)
for step in range(3):
    h = h.detach()
    out, h = rnn(torch.randn(5, 1, 4), h)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
loss = (x ** 2).sum()
loss.backward()
loss.backward()  # error
""",
        """
import torch
import torch.nn as nn
rnn = nn.RNN(4, 8)
opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
h = torch.zeros(1, 1, 8)
for step in range(3):
    out, h = rnn(torch.randn(5, 1, 4), h)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # error
    opt.step()
""",
    ]

    def check(self, facts: Facts):
        for b in facts.backwards.values():
            if not b.freed_hit:
                continue
            first = min((facts.regions[r] for r in b.freed_hit), key=lambda r: (position(r.node), r.order))
            freeing = sorted({n for r in b.freed_hit for n in facts.freed_by.get(r, ())},
                             key=position)
            others = [n for n in freeing if n is not b.node]
            root = facts.text(b.root) if b.root is not None else "this value"
            made = f"`{facts.text(first.node)}`"
            if others:
                by = " and ".join(f"`{facts.text(n)}` on {facts.line(n)}" for n in others[:2])
                cause = f"which {by} already freed"
            else:
                cause = "which this backward already freed on an earlier iteration"
            message = (f"`{root}` is backpropagated through the graph of {made} ({facts.line(first.node)}), {cause}: "
                       f"this raises "
                       f"'Trying to backward through the graph a second time'")
            related = [Related(facts.span(n), "the graph is freed here") for n in others[:3]]
            if not others:
                related.append(Related(facts.span(b.node), "the graph is freed here on an earlier iteration"))
            related.append(Related(facts.span(first.node), f"{made} is computed here, with a graph"))
            yield self.finding(message, facts.span(b.node), related, fixes.freed_graph(facts, b, freeing),
                               facts=facts, entry=b.entry)
