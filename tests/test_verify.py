"""Fixes the engine confirms, and the command line that applies them (`--fix`, `--diff`).

A planned fix is applied and the result analysed again; what still fails, or fails in a
new way, is never offered.  Then end to end: `--diff` prints exactly what `--fix` writes,
`--fix` applies only safe fixes unless `--unsafe-fixes`, and the fixed scripts run clean
under torch (the execution oracle); for the differential tester's generated programs, see
`tests/test_differential.py`.
"""
from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from corpus_support import run_oracle
from gradguard.analysis import analyze
from gradguard.config import Config
from gradguard.verify import applied, fix_all, verified
from test_cli import gradguard

PROGRAMS = Path(__file__).parent / "programs" / "cases"

# `features` is computed once, before the loop: every iteration's backward needs its graph.
# retain_graph=True would keep it, but opt.step() changes the encoder weights it saved.
PRE_LOOP_FEATURES = """\
import torch
import torch.nn as nn

encoder = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8))
head = nn.Linear(8, 1)
opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.1)
features = encoder(torch.randn(16, 4))
for step in range(3):
    loss = head(features).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_fix_the_engine_still_flags_is_not_offered():
    [finding] = analyze(PRE_LOOP_FEATURES)
    planned = [f.title for f in finding.fixes]
    assert any("retain_graph" in t for t in planned)
    retain = next(f for f in finding.fixes if "retain_graph" in f.title)
    assert [g.code for g in analyze(applied(PRE_LOOP_FEATURES, retain)) if g.predicts] == ["GG002"]
    kept = verified(PRE_LOOP_FEATURES, finding)
    assert kept and kept[0].preferred and not any("retain_graph" in f.title for f in kept)
    assert not [g for g in analyze(applied(PRE_LOOP_FEATURES, kept[0])) if g.predicts]


# crashing programs whose fixes are safe (wrapping a weight update, an out-of-place op) or not
SAFE = ["leaf_tensor_update_loop_recorded.py", "loop_inplace_add_after_sigmoid.py"]
UNSAFE = ["gan_block_helper_no_detach.py", "while_not_done_runs_twice.py"]


def _copy(names, into: Path) -> Path:
    into.mkdir()
    for name in names:
        shutil.copy(PROGRAMS / name, into / name)
    return into


def _diff(before: Path, after: Path) -> str:
    out = []
    for path in sorted(before.glob("*.py")):
        old, new = path.read_text(), (after / path.name).read_text()
        out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                    f"a/{path.name}", f"b/{path.name}")
    return "".join(out)


def test_diff_prints_what_fix_writes_and_the_fixed_scripts_run(tmp_path):
    original = _copy(SAFE + UNSAFE, tmp_path / "original")
    work = shutil.copytree(original, tmp_path / "cases")
    shown = gradguard("check", "--diff", "--unsafe-fixes", ".", cwd=work)
    assert shown.returncode == 1 and shown.stdout.startswith("--- a/")
    assert _diff(original, work) == ""  # --diff changes nothing
    fixed = gradguard("check", "--fix", "--unsafe-fixes", ".", cwd=work)
    assert fixed.returncode == 0, fixed.stdout
    assert "Fixed 4 problems" in fixed.stdout
    assert _diff(original, work) == shown.stdout
    outcomes = run_oracle(tmp_path, [p.name for p in sorted(work.glob("*.py"))])
    assert {name: r["kind"] for name, r in outcomes.items()} == {name: "clean" for name in SAFE + UNSAFE}
    assert gradguard("check", "--diff", ".", cwd=work).returncode == 0  # nothing left to fix


def test_fix_applies_safe_fixes_only_unless_asked(tmp_path):
    original = _copy(SAFE + UNSAFE, tmp_path / "original")
    work = shutil.copytree(original, tmp_path / "work")
    run = gradguard("check", "--fix", ".", cwd=work)
    assert run.returncode == 1 and "Fixed 2 problems" in run.stdout
    changed = {p.name for p in work.glob("*.py") if p.read_text() != (original / p.name).read_text()}
    assert changed == set(SAFE)
    assert all(name in run.stdout for name in UNSAFE)  # still reported


# Crashing programs with no mechanical fix, and why (strict: a fix found for one fails until it is removed here)
NO_FIX = {
    "weight_normed_weight_in_param_group_crash.py": "a parametrized weight is computed on each read: whether to "
                                                    "optimize its original parameters or skip the module is the "
                                                    "user's choice",
    "buffers_zero_between_forward_backward.py": "zeroing BatchNorm's buffers mid-step has no edit that keeps its meaning",
    "opaque_model_output_loss_from_labels.py": "the loss is built from the labels alone: nothing to reconnect",
    "requires_grad_from_shape_false.py": "requires_grad is computed from the batch size: which flag is meant is the "
                                         "user's choice",
    "reinforce_log_probs_kept_across_episodes.py": "the list must be emptied once per episode: where is not one edit",
    "distribution_sample_has_no_grad.py": "sample() draws without a graph: whether rsample() is meant is the user's choice",
    "flag_set_through_a_list_of_converted_tensors_crash.py": "requires_grad is set on copies: which tensors the "
                                                             "list should hold is the user's choice",
    "function_forward_runs_without_grad_crash.py": "a custom Function's forward runs without grad: turning it on "
                                                   "there, on a copy that requires grad, is more than one edit",
    "edge_data_popped_by_key_crash.py": "the attention is computed from raw features: which tensor it should "
                                        "read is the user's choice",
    "state_restore_between_steps_crash.py": "load_state_dict overwrites every parameter: whether the restore should "
                                            "go, or move before the graph is built, is the user's choice",
    "tensor_minus_array_of_points_converts_to_numpy_crash.py": "the normals' helper is numpy throughout: after "
                                                               "`torch.as_tensor(self.center)`, the tensor is divided "
                                                               "by `np.linalg.norm` of it (numpy again); the helper "
                                                               "needs porting to torch, and the port does not know "
                                                               "np.linalg",
}


def test_every_program_that_crashes_runs_after_fix(tmp_path):
    """Proof by running, on every crashing program of tests/programs: `fix_all` as
    `--fix --unsafe-fixes` applies it (the preferred confirmed fix of each finding, one at a
    time), then the oracle runs the result under torch."""
    crashing = [p for p in sorted(PROGRAMS.glob("*.py")) if p.read_text().split("\n", 1)[0] != "# expect: clean"]
    (tmp_path / "cases").mkdir()
    for path in crashing:
        fixed = fix_all(path.read_text(), path.name, Config(), unsafe=True)[0]
        (tmp_path / "cases" / path.name).write_text(fixed, encoding="utf-8")
    after = run_oracle(tmp_path, [p.name for p in crashing])
    failed = {name: f"{r['kind']} {r['message'][:80]}" for name, r in after.items() if r["kind"] != "clean"}
    assert set(failed) == set(NO_FIX), failed


AUTOENCODER = """\
import torch
import torch.nn as nn

enc, dec = nn.Linear(10, 4), nn.Linear(4, 10)
opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()))
x = torch.rand(8, 10)
h = enc(x)
recon = dec(h)
code = h.sigmoid_()
{after}loss = (recon - x).pow(2).mean() + code.mean()
loss.backward()
"""


@pytest.mark.parametrize("after, offered", [("", True), ("print(h.norm())\n", False)])
def test_out_of_place_in_an_expression_only_where_no_one_else_sees_the_tensor(after, offered):
    """`code = h.sigmoid()` computes what `code = h.sigmoid_()` did only if `h` is not read again."""
    source = AUTOENCODER.format(after=after)
    [finding] = [f for f in analyze(source) if f.code == "GG002"]
    titles = [f.title for f in verified(source, finding)]
    assert ("Use the out-of-place operation" in titles) == offered, titles
