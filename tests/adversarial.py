"""Adversarial sources: inputs shaped to make a per-file analysis run long or recurse deep.

Each generator takes a size and returns the text of one module: huge literals of tensors,
very long or deeply nested expressions and blocks, long loops and functions, call graphs,
comprehension chains and class bodies: training code in form, only big (they are analysed,
never run).  `bench/bench_timeout.py` runs them at full size through `gradguard check`;
tests/test_bounds.py runs them smaller through `api.check_source`.
"""
from __future__ import annotations

from collections.abc import Callable

HEAD = "import torch\nimport torch.nn as nn\n\n"
TENSOR = "torch.randn(2, requires_grad=True)"


def list_literal(n: int) -> str:
    return HEAD + f"xs = [{', '.join([TENSOR] * n)}]\nloss = sum(xs).sum()\nloss.backward()\nloss.backward()\n"


def tuple_literal(n: int) -> str:
    return HEAD + f"xs = ({', '.join([TENSOR] * n)},)\nloss = sum(xs).sum()\nloss.backward()\n"


def set_literal(n: int) -> str:
    return HEAD + f"xs = {{{', '.join([TENSOR] * n)}}}\nloss = sum(xs).sum()\nloss.backward()\n"


def dict_literal(n: int) -> str:
    items = ", ".join(f"'k{i}': {TENSOR}" for i in range(n))
    return HEAD + f"d = {{{items}}}\nloss = d['k0'].sum() + sum(d.values()).sum()\nloss.backward()\n"


def long_expression(n: int) -> str:
    """`x + x + ... + x`: nested n deep in the tree (thousands of terms defeat the parser)."""
    return HEAD + f"x = {TENSOR}\ny = {' + '.join(['x'] * n)}\ny.sum().backward()\n"


def nested_lists(n: int) -> str:
    return HEAD + f"x = {TENSOR}\ny = {'[' * n}x{']' * n}\nx.sum().backward()\n"


def nested_calls(n: int) -> str:
    return HEAD + f"x = {TENSOR}\ny = {'torch.tanh(' * n}x{')' * n}\ny.sum().backward()\n"


def nested_blocks(n: int) -> str:
    """`if`/`for`/`with` blocks nested n deep (Python allows 100 levels of indentation)."""
    kinds = ("if x.sum() > 0:", "for i in range(3):", "with torch.no_grad():", "while x.sum() < 10:")
    lines = [f"x = {TENSOR}"]
    for depth in range(n):
        lines.append(" " * depth + kinds[depth % len(kinds)])
        lines.append(" " * (depth + 1) + "x = x * 2")
    lines.append("loss = x.sum()\nloss.backward()\nloss.backward()")
    return HEAD + "\n".join(lines) + "\n"


def nested_loops(n: int) -> str:
    """n loops nested, each iterated to a fixpoint (rounds multiply with depth)."""
    lines = ["w = torch.randn(2, requires_grad=True)", "opt = torch.optim.SGD([w], lr=0.1)"]
    for depth in range(n):
        lines.append(" " * depth + f"for i{depth} in range(100):")
    body = " " * n
    lines += [body + "h = (w * i0).relu_()", body + "loss = h.sum()", body + "loss.backward()", body + "opt.step()"]
    return HEAD + "\n".join(lines) + "\n"


def long_loop(n: int) -> str:
    """A training loop whose body is n statements."""
    body = "".join(f"    h = torch.tanh(h @ w{i % 8} + {i})\n" for i in range(n))
    weights = "".join(f"w{i} = torch.randn(4, 4, requires_grad=True)\n" for i in range(8))
    return HEAD + weights + ("opt = torch.optim.SGD([w0, w1, w2, w3, w4, w5, w6, w7], lr=0.1)\n"
                             "for step in range(1000000):\n    h = torch.randn(4, 4)\n" + body +
                             "    loss = h.sum()\n    loss.backward()\n    opt.step()\n")


def long_function(n: int) -> str:
    """One function of n statements, called in a loop."""
    body = "".join(f"    x = x * {i % 7 + 2} + torch.sin(x)\n" for i in range(n))
    return HEAD + ("def f(x):\n" + body + "    return x\n\n"
                   f"w = {TENSOR}\nfor _ in range(10):\n    loss = f(w).sum()\n    loss.backward()\n")


def call_graph(n: int) -> str:
    """n functions, each calling the next two: a call tree exponential in depth."""
    defs = "".join(f"def f{i}(x):\n    y = x * 2\n    return f{i + 1}(y) + f{i + 2}(y.relu())\n\n" for i in range(n))
    tail = f"def f{n}(x):\n    return x\n\ndef f{n + 1}(x):\n    return x.sin()\n\n"
    return HEAD + defs + tail + f"w = {TENSOR}\nloss = f0(w).sum()\nloss.backward()\nloss.backward()\n"


def comprehensions(n: int) -> str:
    """n comprehension statements, each over the previous one's result, in a loop."""
    lines = [f"xs = [{TENSOR} for _ in range(8)]", "for step in range(100):", "    ys = xs"]
    lines += [f"    ys = [y * {i % 5 + 1} for y in ys if y is not None]" for i in range(n)]
    lines += ["    loss = sum(ys).sum()", "    loss.backward()"]
    return HEAD + "\n".join(lines) + "\n"


def nested_comprehension(n: int) -> str:
    """One comprehension with n generators."""
    fors = " ".join(f"for a{i} in xs" for i in range(n))
    return HEAD + f"xs = [{TENSOR} for _ in range(3)]\nys = [a0 * a{n - 1} {fors}]\nsum(ys).sum().backward()\n"


def class_body(n: int) -> str:
    """A module class of n methods, each calling the next through `self`."""
    methods = "".join(f"    def m{i}(self, x):\n        self.h{i} = self.lin(x).relu()\n"
                      f"        return self.m{i + 1}(self.h{i})\n\n" for i in range(n))
    return HEAD + ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                   "        self.lin = nn.Linear(4, 4)\n\n" + methods +
                   f"    def m{n}(self, x):\n        return x\n\n"
                   "    def forward(self, x):\n        return self.m0(x)\n\n"
                   "net = Net()\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
                   "for _ in range(100):\n    loss = net(torch.randn(3, 4)).sum()\n"
                   "    loss.backward()\n    opt.step()\n")


def many_branches(n: int) -> str:
    """n `if`/`else` statements in a row, each joining two states that hold many tensors."""
    lines = [f"ts = [{TENSOR} for _ in range(50)]", "h = ts[0]"]
    for i in range(n):
        lines += [f"if h.sum() > {i}:", f"    h = h * ts[{i % 50}]", "else:", f"    h = h + ts[{(i + 1) % 50}]"]
    lines += ["h.sum().backward()"]
    return HEAD + "\n".join(lines) + "\n"


# name -> (generator, full size): each parses in well under a second here, so the time limit,
# not the parser, decides how long a check of it takes
INPUTS: dict[str, tuple[Callable[[int], str], int]] = {
    "list literal of tensors": (list_literal, 20000),
    "tuple literal of tensors": (tuple_literal, 20000),
    "set literal of tensors": (set_literal, 20000),
    "dict literal of tensors": (dict_literal, 15000),
    "expression too deep to parse": (long_expression, 5000),
    "long expression": (long_expression, 900),
    "nested lists": (nested_lists, 100),
    "nested calls": (nested_calls, 100),
    "nested blocks": (nested_blocks, 99),
    "nested loops": (nested_loops, 12),
    "loop of many statements": (long_loop, 5000),
    "long function": (long_function, 20000),
    "call graph": (call_graph, 2000),
    "chained comprehensions": (comprehensions, 2000),
    "comprehension of many generators": (nested_comprehension, 60),
    "class of many methods": (class_body, 3000),
    "many branches": (many_branches, 5000),
}


def sources(scale: float = 1.0) -> dict[str, tuple[int, str]]:
    """Each input's size and text at `scale` times its full size (at least 1)."""
    out = {}
    for name, (make, size) in INPUTS.items():
        n = max(1, int(size * scale))
        out[name] = (n, make(n))
    return out
