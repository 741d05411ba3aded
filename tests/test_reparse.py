"""Parsing again only what an edit changed (`gradguard.reparse`) gives the tree a whole parse
gives, node for node, with the same positions and stable ids, and the same syntax error."""
from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from gradguard import reparse
from gradguard.analysis import parse, run
from gradguard.ids import number
from gradguard.reparse import Reparser

CASES = sorted((Path(__file__).parent / "programs" / "cases").glob("*.py"))

# what a keystroke or a paste makes of a line, among them what joins a piece to its neighbours
INSERTED = ["else:\n", "    x = 1\n", "@dec\n", "(\n", ")\n", '"""\n', "x = 1; y = 2\n", "\\\n", "def f():\n",
            "    pass\n", "\n", "# c\n", "elif a:\n", "import torch\n", "class A:\n", "    def g(self): return 1\n",
            "'", "#", "  ", "f'{x}'\n", "def f(): return 1\n", "except E:\n", "finally:\n"]
TYPED = ["1", "x", " ", "(", ")", ":", "\n", "'", "", "e", "\\"]


def edited(text: str, rnd: random.Random) -> str:
    lines = text.splitlines(keepends=True) or [""]
    i = rnd.randrange(len(lines))
    kind = rnd.random()
    if kind < 0.25:
        lines.insert(i, rnd.choice(INSERTED))
    elif kind < 0.4:
        del lines[i]
    elif kind < 0.75:
        col = rnd.randrange(len(lines[i]) + 1)
        lines[i] = lines[i][:col] + rnd.choice(TYPED) + lines[i][col + rnd.randrange(2):]
    else:  # lines moved
        j = rnd.randrange(len(lines))
        a, b = sorted((i, j))
        lines[a:b] = lines[a:b][::-1]
    return "".join(lines)


def outcome(parse_it) -> tuple:
    """The tree's every node with its positions and id, or the syntax error."""
    try:
        tree = parse_it()
    except SyntaxError as exc:
        return "error", exc.msg, exc.lineno, exc.offset
    return ast.dump(tree, include_attributes=True), [getattr(n, "gid", None) for n in ast.walk(tree)]


@pytest.mark.parametrize("case", CASES[::12], ids=lambda p: p.stem)
def test_edits_parse_as_the_whole_text_does(case: Path, monkeypatch):
    spliced = []
    real = reparse._spliced
    monkeypatch.setattr(reparse, "_spliced", lambda last, lines: spliced.append(real(last, lines)) or spliced[-1])
    rnd = random.Random(case.stem)
    text = good = case.read_text()
    reparser = Reparser()
    for _ in range(40):
        whole = outcome(lambda: number(parse(text), ""))
        assert outcome(lambda: reparser.parse(text, str(case), parse)) == whole, text
        if whole[0] != "error":
            good = text
        text = edited(good, rnd)
    assert any(tree is not None for tree in spliced)  # the pieces were used, not only whole parses


def test_a_statement_typed_in_is_the_only_one_parsed_again(monkeypatch):
    text = "import torch\n\ndef f(x):\n    return x * 2\n\ndef g(y):\n    return f(y)\n\nprint(g(1))\n"
    reparser = Reparser()
    before = reparser.parse(text, "m.py", parse)
    parsed = []
    real_parse = ast.parse
    monkeypatch.setattr(ast, "parse", lambda source, *a, **k: parsed.append(source) or real_parse(source, *a, **k))
    after = reparser.parse(text.replace("x * 2", "x * 3\n    # doubled"), "m.py", parse)
    assert parsed == ["\ndef f(x):\n    return x * 3\n    # doubled\n\n"]  # with the lines between statements
    assert after.body[0] is before.body[0] and after.body[2] is before.body[2]  # kept, moved a line down
    assert (after.body[2].lineno, after.body[3].lineno) == (7, 10)


def test_a_document_analysed_again_has_the_findings_of_a_whole_parse():
    text = (Path(__file__).parent / "programs" / "cases").joinpath(CASES[0].name).read_text()
    reparser = Reparser()
    run(text, path="a.py", reparser=reparser)
    changed = text.replace("\n", "\n\n", 1)
    findings, _ = run(changed, path="a.py", reparser=reparser)
    assert findings == run(changed, path="a.py")[0]


def test_a_statement_sharing_a_line_with_the_edit_is_parsed_again():
    # `a` ends before the edit, but `b`, after the `;`, runs into it: kept, `a` would leave `+ 3`
    # to parse alone, which it does
    text, edit = "a = 1; b = x \\\n+ 2\nc = 3\n", ("+ 2", "+ 3")
    reparser = Reparser()
    reparser.parse(text, "m.py", parse)
    changed = text.replace(*edit)
    assert outcome(lambda: reparser.parse(changed, "m.py", parse)) == outcome(lambda: number(parse(changed), ""))
