"""GG001: backward through a graph an earlier backward already freed."""
from __future__ import annotations

from gradguard.facts import Facts
from gradguard.fixes import assigned_before, fix, loop_carried_names, prefer, statement_of
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
            regions = [facts.regions[r] for r in sorted(b.freed_hit, key=lambda r: facts.regions[r].node.lineno)]
            first = regions[0]
            freeing = sorted({n for r in b.freed_hit for n in facts.freed_by.get(r, ())},
                             key=lambda n: (n.lineno, n.col_offset))
            root = facts.text(b.root) if b.root is not None else "this value"
            again = b.node in freeing
            where = "an earlier iteration's backward" if again else \
                ", ".join(f"`{facts.text(n)}` (line {n.lineno})" for n in freeing[:2]) or "an earlier backward"
            made = f"`{facts.text(first.node)}` (line {first.node.lineno})"
            message = (f"`{root}` is backpropagated through the graph of {made}, "
                       f"which {where} already freed: this raises 'Trying to backward through the graph a second "
                       f"time'")
            related = [(facts.span(n), "the graph is freed here" + (" (previous iteration)" if n is b.node else ""))
                       for n in freeing[:3] if n is not b.node or again]
            related.append((facts.span(first.node), f"`{facts.text(first.node)}` is computed here, with a graph"))
            from gradguard.findings import Related
            yield self.finding(message, facts.span(b.node), [Related(s, m) for s, m in related],
                               self.fixes(facts, b, regions, freeing))

    def fixes(self, facts, b, regions, freeing):
        out = []
        loop = b.loops[-1] if b.loops else None
        if loop is not None:
            outside = [r for r in regions if loop not in r.loops and r.function is b.function]
            inside_root = any(loop in facts.regions[r].loops for r in b.regions if r in facts.regions)
            if outside and inside_root:
                stmts = []
                for r in outside:
                    s = statement_of(facts, r.node)
                    if s not in stmts:
                        stmts.append(s)
                out.append(fix(facts, "no_grad", "Compute it under `torch.no_grad()` (no gradient into it)",
                               stmts[:1]))
            elif outside:
                out.append(fix(facts, "move_into_loop", "Recompute it inside the loop",
                               [statement_of(facts, outside[0].node)]))
            carried = [c for c in b.carriers if c in loop_carried_names(loop)]
            for name in carried[:1]:
                if assigned_before(facts, name, loop):
                    out.append(fix(facts, "detach_before", f"Detach `{name}` at the start of each iteration",
                                   [loop.body[0]], name))
                else:
                    out.append(fix(facts, "detach_after", f"Detach `{name}` after the backward",
                                   [statement_of(facts, b.node)], name))
        firsts = [n for n in freeing if n is not b.node]
        if firsts:
            out.append(fix(facts, "retain_graph", f"Keep the graph: `retain_graph=True` on line {firsts[-1].lineno}",
                           [firsts[-1]]))
        elif b.node in freeing and not out:
            out.append(fix(facts, "retain_graph", "Keep the graph: `retain_graph=True` on the first backward",
                           [b.node]))
        return prefer(out)
