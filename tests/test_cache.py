"""The result cache of `gradguard check`: less work, never another answer.

An entry must never outlive the bytes, the settings or the analysis it was made with.  That
results are the same with and without the cache, cold or warm, on one process or several, is
`tests/test_same_findings.py`.
"""
import json
from pathlib import Path

from gradguard.api import check_file
from gradguard.cache import Cache, _from_json, _to_json
from gradguard.config import Config
from test_cli import DOUBLE_BACKWARD, gradguard, write

PROGRAMS = Path(__file__).parent / "programs" / "cases"


def test_an_entry_is_exact_for_every_program(tmp_path):
    """Findings, related places and fixes come back from an entry as they were made."""
    for path in sorted(PROGRAMS.glob("*.py")):
        result = check_file(path, Config())
        result.facts = None
        assert _from_json(json.loads(json.dumps(_to_json(result)))) == result, path.name


def test_an_entry_follows_the_bytes_the_path_and_the_settings(tmp_path):
    script = write(tmp_path / "train.py", DOUBLE_BACKWARD)
    cache = Cache(tmp_path, Config())
    data = script.read_bytes()
    key = cache.key("train.py", data)
    assert key != cache.key("train.py", data + b"\n")
    assert key != cache.key("other.py", data)
    assert key != Cache(tmp_path, Config(ignore=frozenset({"GG001"}))).key("train.py", data)
    assert key == Cache(tmp_path, Config(timeout=60.0)).key("train.py", data)  # only errors depend on it

    first = gradguard("check", ".", cwd=tmp_path)
    assert first.returncode == 1 and "GG001" in first.stdout
    script.write_text(DOUBLE_BACKWARD.replace("y.backward()\ny.backward()", "y.backward()"))
    assert gradguard("check", ".", cwd=tmp_path).returncode == 0  # the edit is seen, not the old entry
    script.write_text(DOUBLE_BACKWARD)
    again = gradguard("check", "--ignore", "GG001", ".", cwd=tmp_path)
    assert again.returncode == 0 and "GG001" not in again.stdout


def test_an_unwritable_cache_does_not_fail_the_check(tmp_path):
    write(tmp_path / "train.py", DOUBLE_BACKWARD)
    (tmp_path / ".gradguard_cache").write_text("not a directory")
    run = gradguard("check", ".", cwd=tmp_path)
    assert run.returncode == 1 and "GG001" in run.stdout and not run.stderr
