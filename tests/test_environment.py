"""Imports of the user's code outside the project, resolved as the user's interpreter resolves
them (`gradguard.environment`; another interpreter's path read with jedi): a package
installed in development mode, by a `.pth` path (setuptools' `develop`, a src layout's
editable install) or by a PEP 660 finder (a flat layout's), and a directory on `PYTHONPATH`.
Each interpreter here is a real one: a virtual environment made for the test, whose
site-packages holds what `pip install -e` writes there."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from gradguard.api import check_source
from gradguard.config import Config
from gradguard.environment import UserCode, user_code
from gradguard.workspace import Workspace

HERE = Path(__file__).parent
CASE = HERE / "projects" / "cases" / "features_helper" / "crash"
# the case's script, importing the helper from a package that lives outside the project
SCRIPT = (CASE / "train.py").read_text().replace("from features import embed", "from mylib.features import embed")


def _interpreter(where: Path, pth: str = "", finder: dict | None = None) -> str:
    """A virtual environment at `where` with `pth` as a `.pth` file and, if given, a PEP 660
    finder mapping top-level names to source directories, as pip writes them: its python."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    if pth:
        (site / "__editable__.mylib-0.1.pth").write_text(pth + "\n")
    if finder is not None:
        (site / "__editable___mylib_0_1_finder.py").write_text(
            f"import sys\nMAPPING: dict[str, str] = {finder!r}\nNAMESPACES: dict[str, list[str]] = {{}}\n")
        (site / "__editable__.mylib-0.1.pth").write_text("import __editable___mylib_0_1_finder\n")
    (site / "mylib-0.1.dist-info").mkdir()
    return str(python)


def _library(root: Path) -> Path:
    """`mylib`, a package of the user's, at root/mylib."""
    (root / "mylib").mkdir(parents=True)
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "features.py").write_text((CASE / "features.py").read_text())
    return root


def _found(tmp_path: Path, python: str) -> set:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    result = check_source(SCRIPT, str(project / "train.py"), Config(python=python), workspace=Workspace(project))
    assert result.error is None
    return {(f.code, f.span.line) for f in result.findings}


RAISES = next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if line.endswith("# raises"))


def test_a_package_installed_by_a_pth_path_is_followed(tmp_path):
    library = _library(tmp_path / "elsewhere")
    python = _interpreter(tmp_path / "env", pth=str(library))
    assert library.resolve() in user_code(python).paths
    assert _found(tmp_path, python) == {("GG001", RAISES)}


def test_a_package_installed_by_a_pep660_finder_is_followed(tmp_path):
    library = _library(tmp_path / "elsewhere" / "src")
    python = _interpreter(tmp_path / "env", finder={"mylib": str(library / "mylib")})
    assert user_code(python).packages == {"mylib": library / "mylib"}
    assert _found(tmp_path, python) == {("GG001", RAISES)}


def test_what_the_interpreter_cannot_import_stays_opaque(tmp_path):
    _library(tmp_path / "elsewhere")
    python = _interpreter(tmp_path / "env")
    assert _found(tmp_path, python) == set()  # `embed` is not known: nothing is predicted from it


def test_installed_packages_and_the_standard_library_are_not_the_users_code(tmp_path):
    python = _interpreter(tmp_path / "env")
    found = user_code(python)
    assert found.packages == {} and not any(p.name in ("site-packages", "lib-dynload") or (p / "os.py").exists()
                                            for p in found.paths)


def test_a_broken_interpreter_means_no_code_outside_the_project(tmp_path):
    assert user_code(str(tmp_path / "no-python")) == UserCode()


@pytest.mark.parametrize("on_path", [True, False])
def test_the_command_line_follows_imports_on_its_interpreters_pythonpath(tmp_path, on_path):
    library = _library(tmp_path / "elsewhere")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if on_path:
        env["PYTHONPATH"] = str(library)
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", str(project / "train.py")],
                          capture_output=True, text=True, env=env, cwd=project)
    assert proc.returncode == (1 if on_path else 0), proc.stdout + proc.stderr
    assert (f"train.py:{RAISES}:" in proc.stdout and "GG001" in proc.stdout) is on_path


@pytest.mark.parametrize("how", ["option", "setting"])
def test_the_command_line_resolves_imports_with_the_interpreter_it_is_told(tmp_path, how):
    """`--python PATH`, or `python = "..."` in `[tool.gradguard]` (relative to the pyproject.toml):
    GradGuard runs in its own environment, the project's packages are installed in another."""
    library = _library(tmp_path / "elsewhere")
    python = _interpreter(tmp_path / "project" / ".venv", pth=str(library))
    project = tmp_path / "project"
    (project / "train.py").write_text(SCRIPT)
    option = ["--python", python] if how == "option" else []
    if how == "setting":
        relative = Path(python).relative_to(project)
        (project / "pyproject.toml").write_text(f'[tool.gradguard]\npython = "{relative.as_posix()}"\n')
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", *option, "train.py"],
                          capture_output=True, text=True, cwd=project)
    assert proc.returncode == 1 and f"train.py:{RAISES}:" in proc.stdout and "GG001" in proc.stdout, \
        proc.stdout + proc.stderr
