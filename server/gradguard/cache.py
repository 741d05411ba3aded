"""A cache of `gradguard check` results, so that a re-run over unchanged files is nearly free.

Like `.ruff_cache`: a directory `.gradguard_cache` next to the `pyproject.toml` the settings
came from (else in the working directory), ignored by git through its own `.gitignore`.  An
entry is the result of one file, found by a hash of everything the result depends on: the
file's bytes and the path it is reported under, the settings that choose and grade findings,
and the analysis itself (the size and modification time of every file of this package, so a
new GradGuard, or an edited checkout of it, never reads an old entry, and the version of
IPython, which reads notebooks).  An entry also lists
the workspace modules the analysis followed imports into, with their size and modification
time: when one of them changed, the entry is not used.  Only results without
an error are kept: a timeout depends on the machine's load, and an internal error should be
seen again.  Entries are JSON, never pickle: a cache directory that came with a cloned
repository must not be able to run code.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from importlib import metadata
from functools import lru_cache
from pathlib import Path

from gradguard.api import Checked, NotReadable, check_file, read_source
from gradguard.config import Config
from gradguard.environment import user_code
from gradguard.findings import Edit, Finding, Fix, Related, Span

DIRECTORY = ".gradguard_cache"


class Cache:
    """Results of checked files under `root/.gradguard_cache`; reading or writing an entry
    never fails the check (a read-only tree simply has no cache)."""

    def __init__(self, root: Path, config: Config):
        self.dir = root / DIRECTORY / "v1"
        self.settings = _fingerprint(config)

    def key(self, path: str, data: bytes) -> str:
        h = hashlib.sha256()
        for part in (_engine(), self.settings, path.encode("utf-8", "surrogateescape"), data):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
        return h.hexdigest()

    def get(self, key: str) -> Checked | None:
        """The entry, unless a workspace module the result read has changed since."""
        try:
            data = json.loads((self.dir / key[:2] / f"{key}.json").read_text(encoding="utf-8"))
            if any(_stamp(path) != stamp for path, stamp in data["modules"].items()):
                return None
            return _from_json(data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, key: str, result: Checked) -> None:
        if result.error:
            return
        folder = self.dir / key[:2]
        try:
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                ignore = self.dir.parent / ".gitignore"
                if not ignore.exists():
                    ignore.write_text("# Automatically created by gradguard.\n*\n", encoding="utf-8")
            with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False, encoding="utf-8") as out:
                json.dump(_to_json(result), out)
            os.replace(out.name, folder / f"{key}.json")  # atomic: parallel workers never see half an entry
        except OSError:
            pass


def check_cached(path: Path, config: Config, cache: Cache | None) -> Checked:
    """`api.check_file`, answered from `cache` when the same bytes were checked the same way
    before; the result carries no facts (the command line does not show them)."""
    try:
        data = read_source(path)
    except NotReadable:
        return check_file(path, config)  # which says why it cannot be read
    key = cache.key(str(path), data) if cache is not None else ""
    hit = cache.get(key) if cache is not None else None
    if hit is not None:
        return hit
    result = check_file(path, config, data)
    result.facts = None
    if cache is not None:
        cache.put(key, result)
    return result


def _fingerprint(config: Config) -> bytes:
    """The settings a result depends on (not `timeout`: only errors depend on it, and they are not kept),
    where they came from (`per-file-ignores` patterns and imports resolve from there), and, when
    imports are followed, the user's code the interpreter finds outside the project."""
    return json.dumps([sorted(config.select), sorted(config.ignore), sorted(config.severity.items()),
                       config.enabled, config.follow_imports, str(config.source),
                       sorted([pattern, sorted(codes)] for pattern, codes in config.per_file_ignores),
                       user_code(config.interpreter).key() if config.follow_imports else None]).encode()


@lru_cache(maxsize=1)
def _engine() -> bytes:
    """The analysis this process runs: its package files' names, sizes and modification times,
    and the IPython that reads notebooks' IPython lines (none: they are masked)."""
    package = Path(__file__).resolve().parent
    try:
        stats = [f"ipython:{metadata.version('ipython')}"]
    except metadata.PackageNotFoundError:
        stats = ["ipython:none"]
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".json"):
            st = path.stat()
            stats.append(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(stats).encode()


def _stamp(path: str) -> list | None:
    """A workspace module's size and modification time: what a cached result that read it relies on."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _to_json(result: Checked) -> dict:
    return {"path": result.path, "cells": result.cells, "findings": [asdict(f) for f in result.findings],
            "modules": {path: _stamp(path) for path in result.modules}}


def _from_json(data: dict) -> Checked:
    return Checked(data["path"], findings=[_finding(f) for f in data["findings"]],
                   cells=tuple(tuple(c) for c in data["cells"]), modules=tuple(data["modules"]))


def _finding(d: dict) -> Finding:
    return Finding(d["code"], d["name"], d["severity"], d["message"], Span(**d["span"]),
                   tuple(Related(Span(**r["span"]), r["message"]) for r in d["related"]),
                   tuple(Fix(f["title"], tuple(_edit(e) for e in f["edits"]), f["preferred"], f["applicability"])
                         for f in d["fixes"]),
                   d["predicts"])


def _edit(d: dict) -> Edit:
    return Edit(d["kind"], Span(**d["span"]), d["name"], Span(**d["target"]) if d["target"] else None)
