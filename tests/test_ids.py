"""Stable ids of syntax nodes (`gradguard.ids`), and facts sent across processes with them
(`gradguard.portable`): what the language server's hovers are answered from."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from gradguard import portable
from gradguard.analysis import run
from gradguard.api import check_file
from gradguard.config import Config
from gradguard.ids import Index, gid, number
from gradguard.lsp import hover

HERE = Path(__file__).parent
SERVER = HERE.parent / "server"

BEFORE = '''\
import torch

def helper(x):
    return x * 2

class Net(torch.nn.Module):
    def forward(self, x):
        return [y.relu() for y in x]

    def step(self, batch):
        h = self.forward(batch)
        return sum(h)

def helper(x):
    return (lambda v: v + 1)(x)
'''
# the same module with `Net.forward` edited
AFTER = BEFORE.replace("        return [y.relu() for y in x]",
                       "        x = [t * 3 for t in x if t is not None]\n        return [y.relu() for y in x][::-1]")


def _ids(text: str) -> dict:
    """Each numbered node's id -> what the node itself is: its kind and its own names and
    constants (not its children's, nor its position)."""
    tree = number(ast.parse(text), "train.py")
    return {n.gid: (type(n).__name__, *(v for _, v in ast.iter_fields(n) if isinstance(v, (str, int, type(None)))))
            for n in ast.walk(tree) if "gid" in n.__dict__}


def test_an_edit_inside_a_function_renumbers_nothing_outside_it():
    before, after = _ids(BEFORE), _ids(AFTER)
    inside = [k for k in before if k.startswith("train.py:Net.forward")]
    assert inside and any(before[k] != after.get(k) for k in inside)  # the edited scope did change
    # every other node keeps its id, though the lines below the edit moved
    assert {k: v for k, v in before.items() if not k.startswith("train.py:Net.forward")} == \
        {k: v for k, v in after.items() if not k.startswith("train.py:Net.forward")}
    assert ("FunctionDef", "forward", None, None) in {v for k, v in after.items() if k.startswith("train.py:Net#")}


def test_scopes_are_named_by_qualified_name_and_repeats_are_told_apart():
    scopes = {k.split(":")[1].split("#")[0] for k in _ids(BEFORE)}
    assert scopes == {"", "helper", "Net", "Net.forward", "Net.forward.<listcomp>", "Net.step", "helper@2",
                      "helper@2.<lambda>"}


def test_the_same_text_numbers_alike_in_another_process():
    code = ("import ast, sys; sys.path.insert(0, sys.argv[1]); from gradguard.ids import number\n"
            "print(sorted(n.gid for n in ast.walk(number(ast.parse(sys.stdin.read()), 'train.py'))"
            " if 'gid' in n.__dict__))")
    there = subprocess.run([sys.executable, "-c", code, str(SERVER)], input=BEFORE, capture_output=True,
                           text=True, check=True, env={"PYTHONHASHSEED": "1"}).stdout
    assert there.strip() == str(sorted(_ids(BEFORE)))


def test_an_index_finds_each_node_by_its_id():
    tree = number(ast.parse(BEFORE), "train.py")
    index = Index(tree)
    assert all(index[n.gid] is n for n in ast.walk(tree) if "gid" in n.__dict__)


def test_operators_and_contexts_are_no_places():
    """Shared singletons (`ast.Load()`, `ast.Add()`): an id names their kind, never a place."""
    tree = number(ast.parse("x = a + b"), "m.py")
    assert gid(tree.body[0].value.op) == "<Add>" and gid(tree.body[0].targets[0].ctx) == "<Store>"


# programs that run a backward of their own (the others may have nothing to analyse), and every project
SENT = sorted([p for p in sorted((HERE / "programs" / "cases").glob("*.py")) if ".backward(" in p.read_text()][::7]
              + [*(HERE / "projects" / "cases").glob("*/*/train.py")])


@pytest.mark.parametrize("path", SENT, ids=lambda p: str(p.relative_to(HERE)))
def test_facts_sent_to_another_process_answer_every_hover_alike(path):
    """`portable`: the facts come back with every region, backward and value, pointing into the
    receiver's own parse of the same texts, and every hover reads the same."""
    checked = check_file(path, Config())
    facts = checked.facts
    assert facts is not None
    sent = portable.loads(portable.dumps(facts))
    assert sent.tree is not facts.tree and sent.source == facts.source
    assert sent.regions.keys() == facts.regions.keys() and sent.values.keys() == facts.values.keys()
    assert [gid(b.node) for b in sent.backwards.values()] == [gid(b.node) for b in facts.backwards.values()]
    assert [m.path for m in sent.modules] == [m.path for m in facts.modules]
    lines = facts.source.splitlines()
    for line, text in enumerate(lines, 1):
        for column in range(len(text) + 1):
            assert hover.note_at(sent, line, column) == hover.note_at(facts, line, column)


def test_hovers_read_the_facts_of_a_backward_in_a_loop():
    source = (HERE / "programs" / "cases" / "lstm_cell_state_on_module.py").read_text()
    _, facts = run(source)
    sent = portable.loads(portable.dumps(facts))
    line = next(i for i, text in enumerate(source.splitlines(), 1) if ".backward(" in text)
    column = source.splitlines()[line - 1].index("backward")
    assert hover.note_at(sent, line, column).startswith("**backward** of ")
