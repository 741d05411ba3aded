"""Fixes as text: `gradguard.edits` turns a `Fix` into replacements.

Two layers: each edit kind on small before/after sources (layout, comments, CRLF,
non-ASCII, imports); every fix GradGuard offers on the corpus and the shape programs must
give a file that parses and leaves every line it need not touch byte for byte.  That the
preferred fix of each corpus positive makes it run clean under torch is
`tests/test_lsp_fixes.py::test_preferred_fixes_make_the_corpus_run` (through the server).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from corpus_support import CORPUS, manifest
from gradguard.analysis import analyze
from gradguard.edits import Replacement, apply, replacements
from gradguard.findings import Edit, Fix, Span
from gradguard.rules import ALL_RULES
from gradguard.spans import Positions

PROGRAMS = Path(__file__).parent / "programs" / "cases"
PREDICTS = {r.code: r.predicts for r in ALL_RULES}


# ----------------------------------------------------------------- helpers
def at(src: str, text: str, n: int = 0) -> Span:
    """The character span of the n-th occurrence of `text`."""
    idx = -1
    for _ in range(n + 1):
        idx = src.index(text, idx + 1)

    def pos(i):
        return src.count("\n", 0, i) + 1, i - (src.rfind("\n", 0, i) + 1)
    return Span(*pos(idx), *pos(idx + len(text)))


def stmt(src: str, text: str, n: int = 0) -> Span:
    """The span of the statement that starts where `text` does."""
    start = at(src, text, n)
    pos = Positions(src)
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.stmt):
            sp = pos.span(node)
            if (sp.line, sp.column) == (start.line, start.column):
                return sp
    raise AssertionError(f"no statement starts at {text!r}")


def fixed(src: str, *edits: Edit) -> str:
    reps = replacements(src, Fix("test", tuple(edits)))
    assert reps, "no replacement made"
    return apply(src, reps)


def touched(r: Replacement) -> range:
    """The source lines a replacement changes (none for lines it only inserts before)."""
    sp, last = r.span, r.span.end_line
    if sp.end_column == 0 and (r.text.endswith("\n") or (not r.text and sp.column == 0)):
        last -= 1
    return range(sp.line, last + 1)


def untouched(src: str, reps: list[Replacement], allowed: set[int]) -> list[str]:
    """Problems: replacements out of order or overlapping, a line outside them that is not
    identical in the result (lines mapped through the replacements' line counts), or a
    changed line that no edit names (libcst reformatting more than the fix)."""
    problems = []
    spans = [r.span for r in reps]
    for a, b in zip(spans, spans[1:]):
        if (b.line, b.column) < (a.end_line, a.end_column):
            problems.append(f"overlap or disorder {a} {b}")
    old, new = src.splitlines(True), apply(src, reps).splitlines(True)
    changed = {n for r in reps for n in touched(r)}
    for n in range(1, len(old) + 1):
        if n in changed:
            continue
        shift = sum(r.text.count("\n") - (r.span.end_line - r.span.line) for r in reps if r.span.end_line <= n)
        if n + shift > len(new) or new[n + shift - 1] != old[n - 1]:
            problems.append(f"line {n} is not kept as line {n + shift}")
    if changed - allowed:
        problems.append(f"lines {sorted(changed - allowed)} changed but no edit names them")
    return problems


def check_fix(src: str, fix: Fix) -> list[str]:
    reps = replacements(src, fix)
    if not reps:
        return [f"{fix.title}: no replacement"]
    try:
        ast.parse(apply(src, reps))
    except SyntaxError as e:
        return [f"{fix.title}: does not parse: {e}"]
    allowed = set()
    for e in fix.edits:
        for sp in (e.span, e.target):
            if sp is not None:
                allowed.update(range(sp.line, sp.end_line + 1))
    return [f"{fix.title}: {p}" for p in untouched(src, reps, allowed)]


# ----------------------------------------------------------------- detach / item
@pytest.mark.parametrize("expr, want", [
    ("x", "x.detach()"), ("x.y", "x.y.detach()"), ("f(x)", "f(x).detach()"), ("x[i]", "x[i].detach()"),
    ("a + b", "(a + b).detach()"), ("-x", "(-x).detach()"), ("(a, b)", "(a, b).detach()"),
    ("2", "(2).detach()"), ("a if c else b", "(a if c else b).detach()"),
])
def test_detach_parenthesizes_only_when_needed(expr, want):
    src = f"y = g({expr}, 1)\n"
    assert fixed(src, Edit("detach", at(src, expr))) == f"y = g({want}, 1)\n"


def test_detach_multiline_expression_keeps_comments():
    src = "out = model(\n    enc(x,  # features\n        y),\n    z,\n)\n"
    sp = at(src, "enc(x,  # features\n        y)")
    assert fixed(src, Edit("detach", sp)) == "out = model(\n    enc(x,  # features\n        y).detach(),\n    z,\n)\n"


def test_item_and_non_ascii_columns():
    src = "for é in range(3):\n    total += (λ * 2)  # ünïcode\n"
    assert fixed(src, Edit("item", at(src, "λ * 2"))) == \
        "for é in range(3):\n    total += ((λ * 2).item())  # ünïcode\n"
    src = "s = 'ü'; total += loss\n"
    assert fixed(src, Edit("item", at(src, "loss"))) == "s = 'ü'; total += loss.item()\n"


def test_detach_of_an_assignment_target_is_refused():
    src = "x = 1\n"
    assert replacements(src, Fix("t", (Edit("detach", at(src, "x")),))) == []


# ----------------------------------------------------------------- retain_graph
@pytest.mark.parametrize("call, want", [
    ("loss.backward()", "loss.backward(retain_graph=True)"),
    ("loss.backward(g)", "loss.backward(g, retain_graph=True)"),
    ("loss.backward(retain_graph=False)", "loss.backward(retain_graph=True)"),
    ("loss.backward(g, False)", "loss.backward(g, True)"),
    ("scaler.scale(l).backward()", "scaler.scale(l).backward(retain_graph=True)"),
    ("torch.autograd.grad(y, x)", "torch.autograd.grad(y, x, retain_graph=True)"),
    ("torch.autograd.grad(y, x, None, False)", "torch.autograd.grad(y, x, None, True)"),
    ("accelerator.backward(loss)", "accelerator.backward(loss, retain_graph=True)"),
])
def test_retain_graph(call, want):
    src = f"if ok:\n    {call}  # step\n"
    assert fixed(src, Edit("retain_graph", at(src, call))) == f"if ok:\n    {want}  # step\n"


def test_retain_graph_multiline_call_keeps_layout_and_comments():
    src = "g = torch.autograd.grad(\n    outputs=d,  # critic\n    inputs=x,\n)\n"
    call = at(src, src[4:-1])
    assert fixed(src, Edit("retain_graph", call)) == \
        "g = torch.autograd.grad(\n    outputs=d,  # critic\n    inputs=x,\n    retain_graph=True,\n)\n"
    src = "g = torch.autograd.grad(\n    d,\n)\n"
    assert fixed(src, Edit("retain_graph", at(src, src[4:-1]))) == \
        "g = torch.autograd.grad(\n    d,\n    retain_graph=True,\n)\n"


def test_crlf_is_kept():
    src = "import torch\r\nloss.backward(\r\n    g)  # x\r\nloss.backward()\r\n"
    out = fixed(src, Edit("retain_graph", at(src, "loss.backward(\r\n    g)")))
    assert out == "import torch\r\nloss.backward(\r\n    g, retain_graph=True)  # x\r\nloss.backward()\r\n"
    out = fixed(src, Edit("no_grad", stmt(src, "loss.backward(\r\n")))
    assert out == \
        "import torch\r\nwith torch.no_grad():\r\n    loss.backward(\r\n        g)  # x\r\nloss.backward()\r\n"


# ----------------------------------------------------------------- no_grad
def test_no_grad_simple_statement_with_comments_around():
    src = "import torch\n\n# update\nw -= lr * g  # sgd\nprint(w)\n"
    assert fixed(src, Edit("no_grad", stmt(src, "w -="))) == \
        "import torch\n\n# update\nwith torch.no_grad():\n    w -= lr * g  # sgd\nprint(w)\n"


def test_no_grad_compound_statement_in_a_function():
    src = ("import torch\n\ndef f(ps):\n    for p in ps:\n        # step\n        p -= 1\n"
           "        s = '''a\nb'''\n    return ps\n")
    assert fixed(src, Edit("no_grad", stmt(src, "for p"))) == (
        "import torch\n\ndef f(ps):\n    with torch.no_grad():\n        for p in ps:\n            # step\n"
        "            p -= 1\n            s = '''a\nb'''\n    return ps\n")


def test_no_grad_one_liners():
    src = "import torch\nfor p in ps: p -= 1\n"
    assert fixed(src, Edit("no_grad", stmt(src, "for p"))) == \
        "import torch\nwith torch.no_grad():\n    for p in ps: p -= 1\n"
    src = "import torch\nif x: y += 1  # bump\nz = 2\n"
    assert fixed(src, Edit("no_grad", stmt(src, "y +="))) == \
        "import torch\nif x:  # bump\n    with torch.no_grad():\n        y += 1\nz = 2\n"
    src = "import torch\ndef f():\n    a = 1; b += 2; c = 3  # three\n"
    assert fixed(src, Edit("no_grad", stmt(src, "b +="))) == \
        "import torch\ndef f():\n    a = 1\n    with torch.no_grad():\n        b += 2\n    c = 3  # three\n"
    src = "import torch\nif a:\n    pass\nelif b: w += 1; v = 0\n"
    assert fixed(src, Edit("no_grad", stmt(src, "w +="))) == \
        "import torch\nif a:\n    pass\nelif b:\n    with torch.no_grad():\n        w += 1\n    v = 0\n"


def test_no_grad_multiline_call_and_indentation_units():
    src = "import torch\nif x:\n  y = f(\n      a,  # c\n  )\n"
    assert fixed(src, Edit("no_grad", stmt(src, "y ="))) == \
        "import torch\nif x:\n  with torch.no_grad():\n    y = f(\n        a,  # c\n    )\n"
    src = "import torch\nif x:\n\tfor i in r:\n\t\tw[i] = 0\n"
    assert fixed(src, Edit("no_grad", stmt(src, "w[i]"))) == \
        "import torch\nif x:\n\tfor i in r:\n\t\twith torch.no_grad():\n\t\t\tw[i] = 0\n"


def test_no_grad_consecutive_statements_share_one_block():
    src = "import torch\nfor l, p in kn:\n    w[:, p] -= a  # one\n    w[:, p] += b\n"
    out = fixed(src, Edit("no_grad", stmt(src, "w[:, p] -=")), Edit("no_grad", stmt(src, "w[:, p] +=")))
    assert out == "import torch\nfor l, p in kn:\n    with torch.no_grad():\n        w[:, p] -= a  # one\n" \
                  "        w[:, p] += b\n"


@pytest.mark.parametrize("imports, context, added", [
    ("import torch.nn as nn\nimport torch as th\n", "th.no_grad()", False),
    ("from torch import no_grad\n", "no_grad()", False),
    ("import torch.optim\n", "torch.no_grad()", False),
    ("from torch import nn\nimport numpy as np\n", "torch.no_grad()", True),
])
def test_no_grad_uses_the_module_name_for_torch(imports, context, added):
    src = f'"""doc."""\n{imports}\nw = nn.Parameter(x)\nw += 1\n'
    want = src.replace("w += 1\n", f"with {context}:\n    w += 1\n")
    if added:
        want = want.replace(imports, imports + "import torch\n")
    assert fixed(src, Edit("no_grad", stmt(src, "w += 1"))) == want


def test_no_grad_adds_import_after_docstring_and_future():
    src = '"""Doc."""\nfrom __future__ import annotations\nw += 1\n'
    assert fixed(src, Edit("no_grad", stmt(src, "w +="))) == \
        '"""Doc."""\nfrom __future__ import annotations\nimport torch\nwith torch.no_grad():\n    w += 1\n'
    src = "w += 1"  # no import, no docstring, no final newline
    assert fixed(src, Edit("no_grad", stmt(src, "w +="))) == "import torch\nwith torch.no_grad():\n    w += 1"


# ----------------------------------------------------------------- inserted statements
def test_detach_before_goes_above_the_comments_of_the_first_statement():
    src = "h = zeros()\nfor x in xs:\n    # step the cell\n    h = cell(x, h)\n"
    assert fixed(src, Edit("detach_before", stmt(src, "h = cell"), "h")) == \
        "h = zeros()\nfor x in xs:\n    h = h.detach()\n    # step the cell\n    h = cell(x, h)\n"


def test_inserts_in_one_line_bodies_and_attributes():
    src = "for x in xs: self.h = cell(x, self.h)\n"
    assert fixed(src, Edit("detach_before", stmt(src, "self.h ="), "self.h")) == \
        "for x in xs:\n    self.h = self.h.detach()\n    self.h = cell(x, self.h)\n"
    src = "while True:\n\tloss.backward(); opt.step()\n"
    assert fixed(src, Edit("detach_after", stmt(src, "loss.backward"), "h")) == \
        "while True:\n\tloss.backward()\n\th = h.detach()\n\topt.step()\n"


def test_detach_after_a_compound_statement_goes_after_all_of_it():
    src = "for b in bs:\n    with ctx:\n        loss.backward()\n    # done\nprint(1)\n"
    assert fixed(src, Edit("detach_after", stmt(src, "with ctx"), "h")) == \
        "for b in bs:\n    with ctx:\n        loss.backward()\n    h = h.detach()\n    # done\nprint(1)\n"


def test_clone_retain_grad_zero_grad():
    src = "e = x.exp()\ne[0] = 0.0  # zero\n"
    assert fixed(src, Edit("clone_before", stmt(src, "e[0]"), "e")) == \
        "e = x.exp()\ne = e.clone()\ne[0] = 0.0  # zero\n"
    src = "loss = c.sum()\nloss.backward()\n"
    assert fixed(src, Edit("retain_grad", stmt(src, "loss ="), "loss")) == \
        "loss = c.sum()\nloss.retain_grad()\nloss.backward()\n"
    src = "for i in r:\n    out = m(x)\n"
    assert fixed(src, Edit("zero_grad", stmt(src, "out ="), "opt")) == \
        "for i in r:\n    opt.zero_grad()\n    out = m(x)\n"


def test_insert_after_the_last_line_without_newline():
    src = "loss.backward()"
    assert fixed(src, Edit("detach_after", stmt(src, "loss"), "h")) == "loss.backward()\nh = h.detach()"


# ----------------------------------------------------------------- out of place
@pytest.mark.parametrize("before, after", [
    ("logits += b", "logits = logits + b"),
    ("x *= a + b", "x = x * (a + b)"),
    ("x -= a * b", "x = x - a * b"),
    ("x -= a - b", "x = x - (a - b)"),
    ("self.y @= w", "self.y = self.y @ w"),
    ("attn.masked_fill_(mask, 0.)", "attn = attn.masked_fill(mask, 0.)"),
    ("y.relu_()", "y = y.relu()"),
    ("torch.relu_(y)", "y = torch.relu(y)"),
])
def test_out_of_place(before, after):
    src = f"import torch\ndef f():\n    {before}  # keep\n"
    sp = stmt(src, before)
    assert fixed(src, Edit("out_of_place", sp)) == f"import torch\ndef f():\n    {after}  # keep\n"


@pytest.mark.parametrize("code, text", [
    ("x[i] -= y\n", "x[i] -= y"),          # would still write x in place
    ("y.zero_()\n", "y.zero_()"),           # no out-of-place Tensor.zero
])
def test_out_of_place_refused(code, text):
    assert replacements(code, Fix("t", (Edit("out_of_place", at(code, text)),))) == []


@pytest.mark.parametrize("before, text, after", [
    ("code = h.sigmoid_()  # probs\n", "h.sigmoid_()", "code = h.sigmoid()  # probs\n"),
    ("return std.mul_(eps).add_(mu)\n", "std.mul_(eps)", "return std.mul(eps).add_(mu)\n"),
])
def test_out_of_place_inside_an_expression(before, text, after):
    # the planner offers it only where no one else sees the tensor (`fixes._unobserved`)
    assert fixed(before, Edit("out_of_place", at(before, text))) == after


# ----------------------------------------------------------------- moves
def test_move_into_loop_reindents_a_multiline_statement():
    src = "loss = f(a,\n         b)  # once\nfor i in r:\n    # train\n    loss.backward()\n"
    out = fixed(src, Edit("move_into_loop", stmt(src, "loss = f"), target=stmt(src, "loss.backward")))
    assert out == "for i in r:\n    loss = f(a,\n             b)  # once\n    # train\n    loss.backward()\n"


def test_move_after_leaves_pass_in_an_emptied_block():
    src = "def g():\n    if k:\n        opt.step()\n    l2.backward()\n    done()\n"
    out = fixed(src, Edit("move_after", stmt(src, "opt.step"), target=stmt(src, "l2.backward")))
    assert out == "def g():\n    if k:\n        pass\n    l2.backward()\n    opt.step()\n    done()\n"


def test_move_from_a_semicolon_line():
    src = "opt.step(); n += 1\nloss.backward()\n"
    out = fixed(src, Edit("move_after", stmt(src, "opt.step"), target=stmt(src, "loss.backward")))
    assert out == "n += 1\nloss.backward()\nopt.step()\n"


# ----------------------------------------------------------------- undoing a cut (GG004)
@pytest.mark.parametrize("before, text, after", [
    ("y = t.detach()  # copy\n", "t.detach()", "y = t  # copy\n"),
    ("y = (a + b).detach() * c\n", "(a + b).detach()", "y = (a + b) * c\n"),
    ("y = f(x.data, 1)\n", "x.data", "y = f(x, 1)\n"),
    ("y = x.detach().clone()\n", "x.detach()", "y = x.clone()\n"),
])
def test_remove_detach(before, text, after):
    assert fixed(before, Edit("remove_detach", at(before, text))) == after


@pytest.mark.parametrize("before, text, after", [
    ("c = torch.argmax(b, dim=2).float()\n", "torch.argmax(b, dim=2)",
     "c = (torch.softmax(b.movedim(2, -1), -1) * torch.arange(b.shape[2], dtype=b.dtype, device=b.device))"
     ".sum(-1).float()\n"),
    ("c = x.argmin(1, keepdim=True)\n", "x.argmin(1, keepdim=True)",
     "c = (torch.softmax(-x.movedim(1, -1), -1) * torch.arange(x.shape[1], dtype=x.dtype, device=x.device))"
     ".sum(-1).unsqueeze(1)\n"),
    ("c = th.argmax(self.p[0])\n", "th.argmax(self.p[0])",
     "c = (th.softmax(self.p[0].flatten(), 0) * th.arange(self.p[0].numel(), dtype=self.p[0].dtype, "
     "device=self.p[0].device)).sum()\n"),
])
def test_soft_argmax(before, text, after):
    imports = "import torch as th\n" if "th." in before else "import torch\n"
    assert fixed(imports + before, Edit("soft_argmax", at(imports + before, text))) == imports + after


def test_soft_argmax_refuses_what_it_would_repeat():
    src = "import torch\nc = torch.argmax(f(x), 1)\nd = torch.argmax(x, 1, out=o)\n"
    for text in ("torch.argmax(f(x), 1)", "torch.argmax(x, 1, out=o)"):
        assert replacements(src, Fix("t", (Edit("soft_argmax", at(src, text)),))) == []


@pytest.mark.parametrize("before, text, name, after", [
    ("m = (p > 0.5).float()\n", "(p > 0.5).float()", "prob", "m = p\n"),
    ("m = (0.5 >= p).float() * w\n", "(0.5 >= p).float()", "prob", "m = (1 - p) * w\n"),
    ("m = (z > 0).half()\n", "(z > 0).half()", "logit", "m = z.sigmoid()\n"),
    ("m = (z < -1.0).float()\n", "(z < -1.0).float()", "logit", "m = (-1.0 - z).sigmoid()\n"),
    ("n = (a + b > 2).sum()\n", "a + b > 2", "logit", "n = ((a + b - 2).sigmoid()).sum()\n"),
    ("m = (x > threshold).type(x.dtype)\n", "(x > threshold).type(x.dtype)", "logit",
     "m = (x - threshold).sigmoid()\n"),
])
def test_soft_threshold(before, text, name, after):
    assert fixed(before, Edit("soft_compare", at(before, text), name)) == after


@pytest.mark.parametrize("before, compare, argmax, name, after", [
    ("e = (x.argmax(dim=1) != y).float().mean()\n", "(x.argmax(dim=1) != y).float()", "x.argmax(dim=1)", "",
     "e = (1 - x.softmax(1).gather(1, y.unsqueeze(1)).squeeze(1)).mean()\n"),
    ("p = torch.argmax(f(x), 1)\nfor c in range(3):\n    m = (p == c).float()\n", "(p == c).float()",
     "torch.argmax(f(x), 1)", "p",
     "p = torch.argmax(f(x), 1)\nfor c in range(3):\n    m = f(x).softmax(1).select(1, c)\n"),
])
def test_soft_class_match(before, compare, argmax, name, after):
    src = "import torch\n" + before
    assert fixed(src, Edit("soft_compare", at(src, compare), name, at(src, argmax))) == "import torch\n" + after


def test_soft_compare_leaves_what_is_not_a_number_comparison():
    src = "import torch\nm = (p > q.mean()).float()\nk = (x.argmax() == y).float()\n"
    for text, target in (("(p > q.mean()).float()", None), ("(x.argmax() == y).float()", at(src, "x.argmax()"))):
        assert replacements(src, Fix("t", (Edit("soft_compare", at(src, text), "prob", target),))) == []


def test_numpy_loss_written_with_torch():
    src = ("import numpy as np\nimport torch\n\n\ndef loss_fn(p, t):  # a numpy loss\n"
           "    p = p.detach().cpu().numpy()\n    t = t.numpy()\n    # squared error\n"
           "    e = np.clip(np.abs(p - t), a_min=0.0, a_max=1.0).sum(axis=1, keepdims=True)\n"
           "    return torch.tensor(e.mean() + 1, dtype=torch.float32)\n")
    assert fixed(src, Edit("to_torch", stmt(src, "def loss_fn"))) == (
        "import numpy as np\nimport torch\n\n\ndef loss_fn(p, t):  # a numpy loss\n"
        "    # squared error\n"
        "    e = torch.clamp(torch.abs(p - t), min=0.0, max=1.0).sum(dim=1, keepdim=True)\n"
        "    return e.mean() + 1\n")


def test_numpy_port_refuses_what_it_cannot_write_with_torch():
    src = "import numpy as np\nimport torch\n\n\ndef f(p):\n    a = p.numpy()\n    return torch.tensor(np.median(a))\n"
    assert replacements(src, Fix("t", (Edit("to_torch", stmt(src, "def f")),))) == []


def test_items_back_into_tensors():
    src = "for x in xs:\n    ls.append(crit(m(x)).item())  # one\nloss = torch.tensor(ls).mean()\n"
    out = fixed(src, Edit("stack", at(src, "torch.tensor(ls)")), Edit("remove_item", at(src, "crit(m(x)).item()")))
    assert out == "for x in xs:\n    ls.append(crit(m(x)))  # one\nloss = torch.stack(ls).mean()\n"
    src = "loss = torch.tensor((a + b).item()) * 2\nl2 = torch.tensor(p.mean().item())\n"
    assert fixed(src, Edit("unwrap_item", at(src, "torch.tensor((a + b).item())"))).startswith("loss = (a + b) * 2\n")
    assert fixed(src, Edit("unwrap_item", at(src, "torch.tensor(p.mean().item())"))).endswith("l2 = p.mean()\n")


def test_requires_grad_after():
    src = "w = torch.randn(3) * 0.1  # init\nb = torch.zeros(1)\n"
    out = fixed(src, Edit("requires_grad_after", stmt(src, "w ="), "w"))
    assert out == "w = torch.randn(3) * 0.1  # init\nw.requires_grad_()\nb = torch.zeros(1)\n"


def test_remove_detach_refuses_other_expressions():
    src = "x.data = y\nz = x.detach(0)\n"
    for text in ("x.data", "x.detach(0)"):
        assert replacements(src, Fix("t", (Edit("remove_detach", at(src, text)),))) == []


def test_unwrap_dedents_the_body_and_keeps_comments():
    src = ('def f():\n    with torch.no_grad():  # frozen\n        # forward\n        for b in bs:\n'
           '            out = m(b,\n                    k)\n        s = """x\n        y"""\n    return out\n')
    assert fixed(src, Edit("unwrap", stmt(src, "with torch"))) == (
        'def f():\n    # frozen\n    # forward\n    for b in bs:\n        out = m(b,\n                k)\n'
        '    s = """x\n        y"""\n    return out\n')
    src = "with torch.no_grad(): loss = f(x)  # one\nloss.backward()\n"
    assert fixed(src, Edit("unwrap", stmt(src, "with"))) == "loss = f(x)  # one\nloss.backward()\n"


def test_unwrap_an_if_without_else():
    src = "    if self.c is None:  # lazily\n        self.c = f(x)\n    return self.c\n"
    src = "def g(self):\n" + src
    assert fixed(src, Edit("unwrap", stmt(src, "if self"))) == "def g(self):\n    # lazily\n    self.c = f(x)\n    return self.c\n"
    src = "if c is None:\n    c = 1\nelse:\n    c = 2\n"
    assert replacements(src, Fix("t", (Edit("unwrap", stmt(src, "if c")),))) == []


def test_delete_statements_and_decorators():
    src = "import torch\n\n\n@torch.no_grad()\n@cache\ndef f(x):\n    return x\n"
    assert fixed(src, Edit("delete", at(src, "torch.no_grad()"))) == \
        "import torch\n\n\n@cache\ndef f(x):\n    return x\n"
    src = "@a\n# why b\n@b\ndef f(x):\n    return x\n"  # the comment above a deleted decorator stays
    assert fixed(src, Edit("delete", at(src, "b", 1))) == "@a\n# why b\ndef f(x):\n    return x\n"
    src = "m = M()\nfor p in m.parameters():\n    p.requires_grad = False\nrun(m)\n"
    assert fixed(src, Edit("delete", stmt(src, "for p"))) == "m = M()\nrun(m)\n"
    src = "if freeze:\n    m.requires_grad_(False)  # all\nrun(m)\n"
    assert fixed(src, Edit("delete", stmt(src, "m.requires"))) == "if freeze:\n    pass\nrun(m)\n"
    src = "m = M(); m.requires_grad_(False)\n"
    assert fixed(src, Edit("delete", stmt(src, "m.requires"))) == "m = M()\n"


# ----------------------------------------------------------------- odd input
def test_lone_carriage_returns():
    src = "import torch\rif x:\r    w += 1\r"
    assert fixed(src, Edit("no_grad", Span(3, 4, 3, 10))) == \
        "import torch\rif x:\r    with torch.no_grad():\r        w += 1\r"


@pytest.mark.parametrize("src, edit", [
    ("x = 1\n", Edit("detach", Span(9, 0, 9, 1))),                      # no such place
    ("x = (\n", Edit("detach", Span(1, 0, 1, 1))),                      # does not parse
    ("x = 1\n", Edit("frobnicate", Span(1, 0, 1, 5))),                  # unknown kind
    ("if a:\n    pass\nelif b:\n    pass\n", Edit("no_grad", Span(3, 0, 4, 8))),  # an elif is no statement
    ("x = 1\n", Edit("detach_before", Span(1, 0, 1, 5), "not a name!")),
])
def test_unsafe_or_odd_input_gives_nothing(src, edit):
    assert replacements(src, Fix("t", (edit,))) == []


def test_overlapping_edits_give_nothing():
    src = "y = f(a)\n"
    assert replacements(src, Fix("t", (Edit("detach", at(src, "a")), Edit("detach", at(src, "f(a)"))))) == []


# ----------------------------------------------------------------- every fix GradGuard offers
def _predicted(case):
    source = (CORPUS / case["file"]).read_text(encoding="utf-8")
    finding = next((f for f in analyze(source) if f.span.line == case["line"] and PREDICTS[f.code] == case["kind"]),
                   None)
    return source, finding


def test_every_corpus_fix_parses_and_keeps_other_lines():
    problems = []
    for case in manifest():
        if case["kind"] == "clean":
            continue
        source, finding = _predicted(case)
        for fix in finding.fixes if finding else ():
            problems += [f"{case['id']}: {p}" for p in check_fix(source, fix)]
    assert not problems, "\n".join(problems)


def test_every_program_fix_parses_and_keeps_other_lines():
    problems = []
    for path in sorted(PROGRAMS.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        for finding in analyze(source):
            for fix in finding.fixes:
                problems += [f"{path.name} {finding.code}: {p}" for p in check_fix(source, fix)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("before, text, after", [
    ("sel = torch.from_numpy(out.cpu().data.numpy()[hard])\n", "torch.from_numpy(out.cpu().data.numpy()[hard])",
     "sel = out[hard]\n"),
    ("w = torch.from_numpy(x.detach().numpy()) * 2\n", "torch.from_numpy(x.detach().numpy())", "w = x * 2\n"),
])
def test_numpy_copy_becomes_the_tensor_itself(before, text, after):
    src = "import torch\n" + before
    assert fixed(src, Edit("unwrap_numpy", at(src, text))) == "import torch\n" + after
