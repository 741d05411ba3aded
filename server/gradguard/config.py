"""Settings: which rules run, at what severity, and how long one file may take.

They come from `[tool.gradguard]` in a `pyproject.toml`, from the command line, and later from
the editor; all three go through the same validation (`_validated`), so a bad value gives the
same one-line `ConfigError` naming the key wherever it was written, never a traceback.

Rule selection works like ruff's: `select` and `ignore` hold codes, code prefixes (`GG0`,
`GG1`, `GG`) or `ALL`; a code runs when it matches `select` and the most specific (longest)
matching `select` entry is longer than the most specific matching `ignore` entry.  An opt-in
rule (GG100) runs only when `select` names its code.  `per-file-ignores` then takes codes off
the files its gitignore-style patterns match, whatever `select` says.

Each file has the settings of the nearest `pyproject.toml` with `[tool.gradguard]` above it, in
the editor (`load_config`) and on the command line (`Configs`) alike.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from gradguard.ignore import patterns

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - depends on the interpreter
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

SEVERITIES = ("error", "warning", "info", "hint")
KEYS = ("select", "ignore", "severity", "enabled", "timeout", "exclude", "follow-imports", "respect-gitignore",
        "force-exclude", "per-file-ignores", "python")
SWITCHES = ("enabled", "follow-imports", "respect-gitignore", "force-exclude")  # the keys that take true or false


class ConfigError(ValueError):
    """A bad setting; `str()` is one line that names where and which key."""


@dataclass(frozen=True)
class Config:
    select: frozenset[str] = frozenset({"ALL"})
    ignore: frozenset[str] = frozenset()
    severity: Mapping[str, str] = field(default_factory=dict)  # code -> severity override
    enabled: bool = True
    timeout: float = 5.0  # seconds of analysis per file
    exclude: tuple[str, ...] = ()  # gitignore-style patterns, skipped while walking directories
    follow_imports: bool = True  # follow calls into the project's own modules (workspace.py)
    respect_gitignore: bool = True  # a walk also passes over what git ignores (gradguard.ignore)
    force_exclude: bool = False  # `exclude` and git's ignores apply to paths named on the command line too
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()  # (pattern, codes not reported in its files)
    python: str | None = None  # the interpreter whose installed code imports may lead to (None: GradGuard's own)
    source: Path | None = None  # the pyproject.toml the settings came from; patterns are relative to it

    @property
    def base(self) -> Path:
        """The directory `exclude` and `per-file-ignores` patterns are relative to: the
        pyproject.toml's, else the working directory (as for ruff)."""
        return self.source.parent if self.source is not None else Path.cwd().resolve()

    @property
    def interpreter(self) -> str:
        """The path of the interpreter imports resolve with (`environment`): `python`, relative
        to the pyproject.toml's directory, else the one running GradGuard."""
        if self.python is None:
            return sys.executable
        path = Path(self.python).expanduser()
        return str(path if path.is_absolute() or self.source is None else self.source.parent / path)

    def selects(self, code: str, path: str | None = None) -> bool:
        """Whether findings of rule `code` are reported (see the module docstring), in the file
        at `path` when given (`per-file-ignores`)."""
        if code in _opt_in_codes():
            chosen = len(code) if code in self.select else None
        else:
            chosen = _longest_match(self.select, code)
        if chosen is None:
            return False
        ignored = _longest_match(self.ignore, code)
        if ignored is not None and chosen <= ignored:
            return False
        return path is None or not self.per_file_ignores or \
            _longest_match(_file_ignores(self.per_file_ignores, self.base, str(path)), code) is None

    def merged(self, overrides: Mapping[str, Any], where: str = "settings") -> Config:
        """These settings with `overrides` (same keys as `[tool.gradguard]`) on top.

        `None` values are skipped (editors send null for "unset"); `severity` entries are added
        to the existing ones, every other key replaces its value.
        """
        changes = _validated({k: v for k, v in overrides.items() if v is not None}, where)
        if "severity" in changes:
            changes["severity"] = {**self.severity, **changes["severity"]}
        return replace(self, **changes)


def load_config(start: Path) -> Config:
    """The settings of the nearest `pyproject.toml` with a `[tool.gradguard]` table.

    Looks in `start` (or its directory, for a file) and then in each parent, like ruff: a
    `pyproject.toml` without the table is passed over, so a sub-project without settings of
    its own uses its parent's. No such file gives the defaults.
    """
    start = start.resolve()
    return _nearest(start if start.is_dir() else start.parent, {})


class Configs:
    """The settings of each directory in one run of the command line: those `load_config`
    finds for it (what the editor uses for a file there), or `fixed` ones for every directory
    (`--config`), each with `adjust` (the command line's options) applied.  Every
    `pyproject.toml` is read once, and a directory's settings are looked up once."""

    def __init__(self, fixed: Config | None = None, adjust: Callable[[Config], Config] = lambda config: config):
        self._fixed = fixed
        self._adjust = adjust
        self._found: dict[Path, Config] = {}  # resolved directory -> the settings found for it
        self._adjusted: dict[Path | None, Config] = {}  # pyproject.toml -> its settings adjusted
        self._by_dir: dict[Path, Config] = {}  # directory as asked -> the answer

    def __call__(self, directory: Path) -> Config:
        if directory not in self._by_dir:
            found = self._fixed if self._fixed is not None else _nearest(Path(directory).resolve(), self._found)
            if found.source not in self._adjusted:
                self._adjusted[found.source] = self._adjust(found)
            self._by_dir[directory] = self._adjusted[found.source]
        return self._by_dir[directory]


def _nearest(directory: Path, found: dict[Path, Config]) -> Config:
    """The settings for `directory` (resolved), remembered in `found` for it and the
    directories passed on the way up."""
    if directory not in found:
        candidate = directory / "pyproject.toml"
        table = _read_table(candidate) if candidate.is_file() else None
        if table is not None:
            found[directory] = _from_table(table, candidate)
        else:
            found[directory] = Config() if directory.parent == directory else _nearest(directory.parent, found)
    return found[directory]


def load_config_file(path: Path) -> Config:
    """The settings of this `pyproject.toml` (for `--config`); no table gives the defaults."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    return _from_table(_read_table(path) or {}, path)


def _read_table(path: Path) -> dict | None:
    if tomllib is None:
        raise ConfigError(f"{path}: reading pyproject.toml needs Python 3.11+ or the 'tomli' package")
    try:
        with path.open("rb") as stream:
            document = tomllib.load(stream)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{path}: 'tool' must be a table, not {tool!r}")
    table = tool.get("gradguard")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.gradguard] must be a table, not {table!r}")
    return table


def _from_table(table: dict, path: Path) -> Config:
    return replace(Config(**_validated(table, f"{path}: [tool.gradguard]")), source=path.resolve())


def _validated(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Checked and normalised settings, as `Config` field values."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key '{key}' (known: {', '.join(KEYS)})")
        if key in ("select", "ignore"):
            out[key] = frozenset(_selector(code, where, key) for code in _strings(value, where, key))
            if key == "select" and not out[key]:  # a silent run that finds nothing would pass as clean
                raise ConfigError(f"{where}: 'select' is empty: no rule would run; remove it or list codes")
        elif key == "exclude":
            out[key] = tuple(_strings(value, where, key))
        elif key == "severity":
            out[key] = _severities(value, where)
        elif key == "per-file-ignores":
            out["per_file_ignores"] = _per_file_ignores(value, where)
        elif key == "python":
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{where}: 'python' must be the path of a Python interpreter, not {value!r}")
            out[key] = value
        elif key in SWITCHES:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: '{key}' must be true or false, not {value!r}")
            out[key.replace("-", "_")] = value
        else:  # timeout
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{where}: 'timeout' must be a positive number of seconds, not {value!r}")
            out[key] = float(value)
    return out


def _strings(value: Any, where: str, key: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)) \
            or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: '{key}' must be a list of strings, not {value!r}")
    return list(value)


def _selector(code: str, where: str, key: str) -> str:
    """`code` in upper case, if it is `ALL` or the code or prefix of at least one rule."""
    code = code.strip().upper()
    if not code or code != "ALL" and not any(known.startswith(code) for known in _known_codes()):
        raise ConfigError(f"{where}: '{key}' names no rule: {code!r} (see `gradguard rules`)")
    return code


def _per_file_ignores(value: Any, where: str) -> tuple[tuple[str, frozenset[str]], ...]:
    if not isinstance(value, Mapping) or not all(
            isinstance(codes, (list, tuple)) and all(isinstance(code, str) for code in codes) for codes in value.values()):
        raise ConfigError(f"{where}: 'per-file-ignores' must be a table of \"pattern\" = [\"CODE\", ...], not {value!r}")
    return tuple((str(pattern), frozenset(_selector(code, where, "per-file-ignores") for code in codes))
                 for pattern, codes in value.items())


@lru_cache(maxsize=4096)
def _file_ignores(entries: tuple[tuple[str, frozenset[str]], ...], base: Path, path: str) -> frozenset[str]:
    """The codes `per-file-ignores` takes off the file at `path` (as the file or a directory
    above it matches a pattern, relative to `base`)."""
    resolved = Path(path).resolve()
    return frozenset(code for pattern, codes in entries if patterns(base, (pattern,)).covers(resolved, False)
                     for code in codes)


def _severities(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: 'severity' must be a table of code = severity, not {value!r}")
    out = {}
    for code, level in value.items():
        if str(code).upper() not in _known_codes():
            raise ConfigError(f"{where}: 'severity' names an unknown rule code {code!r}")
        if level not in SEVERITIES:
            raise ConfigError(f"{where}: severity of {code} must be one of {', '.join(SEVERITIES)}, not {level!r}")
        out[str(code).upper()] = level
    return out


def _known_codes() -> list[str]:
    from gradguard.rules import ALL_RULES  # imported when first needed: it loads every rule module

    return [rule.code for rule in ALL_RULES]


@lru_cache(maxsize=1)
def _opt_in_codes() -> frozenset[str]:
    from gradguard.rules import ALL_RULES

    return frozenset(rule.code for rule in ALL_RULES if rule.opt_in)


def _longest_match(selectors: frozenset[str], code: str) -> int | None:
    lengths = [0 if s == "ALL" else len(s) for s in selectors if s == "ALL" or code.startswith(s)]
    return max(lengths, default=None)
