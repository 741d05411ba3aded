"""Notebooks as they are written: IPython lines between the Python, a bug spread over cells.

The notebook below holds every kind of IPython line and two real autograd bugs (the GAN
step of tests/programs/cases/gan_no_detach.py and the in-place case of inplace_relu_saved.py,
split into cells).  It must get the findings of the plain script it stands for (its Python
lines alone), at the cells' lines and with messages naming cells' lines: with IPython's own
input transformer and with the masking used where IPython is not installed, through the API
and through `gradguard check` (text and JSON).
"""
import json
import re
import subprocess
import sys

import pytest
from gradguard.api import check_source
from gradguard.config import Config
from gradguard.notebook import PLACEHOLDER, join_cells, notebook_source
from test_cli import REPO, gradguard, write

CELLS = [
    ("markdown", "# A GAN, and an activation changed in place\n"),
    ("code", "%matplotlib inline\n%load_ext autoreload\n!pip install torch\nimport torch\nimport torch.nn as nn\n"),
    ("code", "files = !ls\n"
             "G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))\n"
             "D = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid())\n"
             "G?\nD??\n"
             "opt_g = torch.optim.Adam(G.parameters())\nopt_d = torch.optim.Adam(D.parameters())\n"
             "bce = nn.BCELoss()\n"),
    ("markdown", "## Training\n"),
    ("code", "%%time\n"
             "for step in range(3):\n"
             "    real = torch.randn(5, 4)\n"
             "    fake = G(torch.randn(5, 2))\n"
             "    !nvidia-smi\n"
             "    loss_d = bce(D(real), torch.ones(5, 1)) + bce(D(fake), torch.zeros(5, 1))\n"
             "    opt_d.zero_grad()\n"
             "    loss_d.backward()\n"
             "    stats = %timeit -o opt_d.step()\n"
             "    opt_d.step()\n"
             "    loss_g = bce(D(fake), torch.ones(5, 1))\n"
             "    opt_g.zero_grad()\n"
             "    loss_g.backward()\n"
             "    opt_g.step()\n"),
    ("code", "%%bash\necho 'y = y * 2'\n"),
    ("code", "%%capture\nx = torch.randn(4, requires_grad=True)\ny = torch.sigmoid(x)\n"),
    # Not Python run in the kernel: analysed, `y = y * 2` would hide the in-place bug.
    ("code", "%%writefile scale.py\ny = y * 2\n"),
    ("code", "%%sh\ny = y * 2\n"),
    ("code", "%%html\n<b>y = y * 2</b>\n"),
    ("code", "t = %timeit -o y.sum()\n?y\ny.relu_()\n"),
    # `!ls \` continued: IPython's transformer joins the two lines, so this cell is masked.
    ("code", "y.sum().backward()\n!ls \\\n    -la\n"),
]
# The lines that are IPython's; without them, and without the cells of other languages'
# magics, the code cells are the plain script.
IPYTHON_LINES = {"%matplotlib inline", "%load_ext autoreload", "!pip install torch", "files = !ls", "G?", "D??",
                 "%%time", "    !nvidia-smi", "    stats = %timeit -o opt_d.step()", "%%capture",
                 "t = %timeit -o y.sum()", "?y", "!ls \\", "    -la"}
OTHER_LANGUAGES = ("%%bash", "%%writefile", "%%sh", "%%html")


def notebook(cells) -> str:
    return json.dumps({"cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True),
                                  **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                                 for kind, text in cells],
                       "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                       "nbformat": 4, "nbformat_minor": 5})


def plain_script(cells) -> tuple[str, list[tuple[int, int]]]:
    """The notebook's Python as a script, and (cell, line in the cell) of each script line."""
    lines, origin = [], []
    for number, (kind, text) in enumerate(cells, 1):
        if kind != "code" or text.startswith(OTHER_LANGUAGES):
            continue
        for line_number, line in enumerate(text.splitlines(), 1):
            if line not in IPYTHON_LINES:
                lines.append(line)
                origin.append((number, line_number))
    return "".join(line + "\n" for line in lines), origin


SCRIPT, ORIGIN = plain_script(CELLS)


def in_cells(message: str) -> str:
    """A message of the script with its lines named as the notebook's."""
    return re.sub(r"\bline (\d+)\b", lambda m: "line {1} of cell {0}".format(*ORIGIN[int(m.group(1)) - 1]), message)


def script_findings() -> list[tuple]:
    checked = check_source(SCRIPT, "train.py", Config())
    assert checked.error is None
    return [(f.code, *ORIGIN[f.span.line - 1], f.span.column, in_cells(f.message),
             [(*ORIGIN[r.span.line - 1], r.span.column, r.message) for r in f.related]) for f in checked.findings]


@pytest.fixture(params=[True, False], ids=["ipython", "masking"])
def ipython(request) -> bool:
    if request.param:
        pytest.importorskip("IPython")
    return request.param


def test_notebook_gets_the_findings_of_its_plain_script(ipython):
    text, cells = notebook_source(notebook(CELLS).encode(), ipython=ipython)
    assert ("get_ipython()" in text) is ipython and (PLACEHOLDER in text) is not ipython
    checked = check_source(text, "train.ipynb", Config(), cells=cells)
    assert checked.error is None
    found = [(f.code, *checked.locate(f.span.line), f.span.column, f.message,
              [(*checked.locate(r.span.line), r.span.column, r.message) for r in f.related])
             for f in checked.findings]
    assert found == script_findings()
    assert [(code, cell, line) for code, cell, line, *_ in found] == [("GG001", 5, 13), ("GG002", 12, 1)]
    assert "`G(torch.randn(5, 2))` (line 4 of cell 5)" in found[0][4]
    assert "`torch.sigmoid(x)` (line 3 of cell 7)" in found[1][4] and "(line 3 of cell 11)" in found[1][4]


def script_to_notebook_text(output: str) -> str:
    """`gradguard check train.py`'s output as that of the notebook."""
    def where(m):
        cell, line = ORIGIN[int(m.group(2)) - 1]
        return f"{m.group(1)}train.ipynb:cell {cell}:{line}:"
    return in_cells(re.sub(r"^(\s*)train\.py:(\d+):", where, output, flags=re.M))


def test_command_line_reports_the_notebook_as_its_plain_script(tmp_path):
    write(tmp_path / "train.ipynb", notebook(CELLS))
    write(tmp_path / "train.py", SCRIPT)
    run = gradguard("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    expected = gradguard("check", "--no-cache", "train.py", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (1, "")
    assert run.stdout == script_to_notebook_text(expected.stdout)
    assert "train.ipynb:cell 12:1:1: GG002 [error]" in run.stdout

    records = json.loads(gradguard("check", "--no-cache", "--format", "json", "train.ipynb", cwd=tmp_path).stdout)
    script_records = json.loads(gradguard("check", "--no-cache", "--format", "json", "train.py", cwd=tmp_path).stdout)
    for record in script_records:
        record.update(path="train.ipynb", message=in_cells(record["message"]))
        if "fix" in record:
            record["fix"] = None  # notebooks are reported, not fixed
        (record["cell"], record["line"]), record["end_line"] = ORIGIN[record["line"] - 1], \
            ORIGIN[record["end_line"] - 1][1]
        for related in record["related"]:
            related.update(path="train.ipynb")
            related["cell"], related["line"] = ORIGIN[related["line"] - 1]
    assert records == script_records and len(records) == 2


@pytest.mark.parametrize(("cell", "masked"), [
    ("files = !ls", ["files = " + PLACEHOLDER]),
    ("a, b = !ls", ["a, b = " + PLACEHOLDER]),
    ("d['k'] = %sx ls", ["d['k'] = " + PLACEHOLDER]),
    ("x = %timeit -o f()", ["x = " + PLACEHOLDER]),
    ("%matplotlib inline\n%load_ext autoreload", ["pass", "pass"]),
    ("!pip install torch", ["pass"]),
    ("obj?\nobj.attr??\n?obj", ["pass", "pass", "pass"]),
    ("for i in range(2):\n    !echo hi\n    r = !ls", ["for i in range(2):", "    pass", "    r = " + PLACEHOLDER]),
    ("!ls \\\n    -la\nx = 1", ["pass", "", "x = 1"]),
    # Python, not IPython: left as they are
    ("x = 1  # why?\nprint('?')", ["x = 1  # why?", "print('?')"]),
    ("print('%.4f'\n      % loss)", ["print('%.4f'", "      % loss)"]),
    ('s = """\n%not a magic\n!nor this"""', ['s = """', "%not a magic", '!nor this"""']),
    ("x = 'a\\\n%b'", ["x = 'a\\", "%b'"]),
    ("y = x == 1", ["y = x == 1"]),
])
def test_masking_keeps_every_line_in_place(cell, masked):
    text, cells = join_cells([(1, cell)], ipython=False)
    assert text.splitlines() == masked and cells == ((1, 1),)


@pytest.mark.parametrize(("cell", "python"), [
    ("%%time\nx = 1", ["pass", "x = 1"]),
    ("%%timeit\nx = 1", ["pass", "x = 1"]),
    ("%%capture out --no-stderr\nfiles = !ls", ["pass", "files = " + PLACEHOLDER]),
    ("%%time\n%%capture\nx = 1", ["pass", "pass", "x = 1"]),
    ("\n%%time\nx = 1", ["", "pass", "x = 1"]),
    ("%%bash\nls", None),
    ("%%sh\nls", None),
    ("%%html\n<b>x</b>", None),
    ("%%writefile model.py\nx = 1", None),
    ("%%python3\nx = 1", None),
])
def test_cell_magics_run_their_body_as_python_or_leave_the_cell_out(cell, python, ipython):
    text, cells = join_cells([(4, cell)], ipython=ipython)
    if python is None:
        assert (text, cells) == ("", ())
    else:
        assert len(text.splitlines()) == len(python) and cells == ((1, 4),)
        if not ipython:
            assert text.splitlines() == python


def test_ipython_transformer_keeps_lines_and_their_columns():
    """IPython's transformer, without its clean-ups that drop a cell's leading blank lines or
    its indentation, and masking for a cell it would shorten."""
    pytest.importorskip("IPython")
    text, _ = join_cells([(1, "\n\nfiles = !ls\nx = 1\n"), (2, "!ls \\\n  -la\ny = 2\n")])
    assert text.splitlines() == ["", "", "files = get_ipython().getoutput('ls')", "x = 1", "pass", "", "y = 2"]


def test_an_ipython_value_is_unknown_not_a_tensor(ipython):
    text, cells = join_cells([(1, "import torch\nloss = !echo 1\nloss.backward()\nloss.backward()\n")],
                             ipython=ipython)
    checked = check_source(text, "nb.ipynb", Config(), cells=cells)
    assert checked.error is None and checked.findings == []


def test_cells_are_analysed_in_notebook_order():
    """The order of the cells in the file, not their execution counts: moved above the cell
    that makes it, the loss is not yet defined where it is backpropagated."""
    make = "import torch\nx = torch.randn(3, requires_grad=True)\nloss = (x ** 2).sum()\n"
    twice = "loss.backward()\nloss.backward()\n"
    assert codes([make, twice]) == ["GG001"]
    assert codes([twice, make]) == []


def codes(cells: list[str]) -> list[str]:
    text, starts = join_cells(enumerate(cells, 1))
    return [f.code for f in check_source(text, "nb.ipynb", Config(), cells=starts).findings]


def test_the_server_and_command_line_do_not_import_ipython_to_start():
    run = subprocess.run([sys.executable, "-c", "import sys, gradguard.cli, gradguard.lsp.server, gradguard.api; "
                          "print('IPython' in sys.modules)"], capture_output=True, text=True, timeout=60,
                         cwd=REPO / "server")
    assert run.stdout.strip() == "False", run.stderr
