"""Editor settings, per workspace folder.

A multi-root window can set `gradguard.select` differently in each folder, so a client that
answers `workspace/configuration` is asked for the "gradguard" section with a document's URI
as scope, once per workspace folder; the answers are kept until `workspace/didChangeConfiguration`
says they changed.  A client that does not answer that request, or answers with nothing for the
section (Neovim without `settings`), gets the settings of `initializationOptions`, replaced by
those a `workspace/didChangeConfiguration` carries.  Settings are `[tool.gradguard]` keys
(`documents.Analyses.config_for` lays them over pyproject.toml's), except `diagnosticMode`, the
server's own (`mode`): a window's, so it is asked for without a scope.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import unquote

KEYS = ("enable", "enabled", "select", "ignore", "severity", "timeout", "followImports", "follow-imports",
        "diagnosticMode")
# `diagnosticMode`: which files workspace diagnostics cover, as Pylance's setting of that name;
# the first is the default (a workspace pull answers at once, with nothing)
MODES = ("openFilesOnly", "workspace")
_WINDOW = "window:"  # `FolderSettings`' key for the window's settings: no folder URI looks like it


def parse(options) -> dict:
    """Settings sent as `{"gradguard": {...}}`, `{"settings": {"gradguard": {...}}}`, `{"settings": {...}}`
    or flat, as `[tool.gradguard]` keys; nulls (unset) and `diagnosticMode` (see `mode`) left out."""
    return _normalise(_section(options))


def mode(options, log: Callable[[str], None]) -> str:
    """`diagnosticMode` of settings sent as `parse` takes them; unset, the default, and anything
    else too, after one line in the log that says why."""
    value = _section(options).get("diagnosticMode")
    if value is None or value in MODES:
        return value or MODES[0]
    log(f"gradguard: settings: 'diagnosticMode' must be one of {', '.join(map(repr, MODES))}, not {value!r}: "
        f"{MODES[0]!r} used")
    return MODES[0]


def _section(options) -> dict:
    if not isinstance(options, dict):
        return {}
    for key in ("gradguard", "settings"):
        if isinstance(options.get(key), dict):
            return _section(options[key]) if key == "settings" and "gradguard" in options[key] else options[key]
    return {k: v for k, v in options.items() if k in KEYS}


def _normalise(settings: dict) -> dict:
    out = dict(settings)
    if "enable" in out:
        out["enabled"] = out.pop("enable")
    if "followImports" in out:
        out["follow-imports"] = out.pop("followImports")
    out.pop("diagnosticMode", None)
    return {k: v for k, v in out.items() if v is not None}


class FolderSettings:
    """`ask(scope_uri)`: the client's answer to `workspace/configuration` for the section (a
    window's when `scope_uri` is None), or None when the client does not support the request;
    `folders()`: the workspace folders' URIs."""

    def __init__(self, folders: Callable[[], Iterable[str]], log: Callable[[str], None]):
        self.folders = folders
        self.log = log
        self.ask: Callable[[str], Awaitable[object]] | None = None
        self.fallback: dict = {}  # initializationOptions, or the last didChangeConfiguration's settings
        self.fallback_mode = MODES[0]  # their `diagnosticMode`
        # folder URI (None: outside every folder; WINDOW: no scope) -> (settings, diagnosticMode), or None
        self._asked: dict[str | None, asyncio.Future] = {}

    def folder_of(self, uri: str) -> str | None:
        """The innermost workspace folder holding `uri`."""
        uri = unquote(uri)
        inside = [f for f in map(unquote, self.folders()) if uri == f or uri.startswith(f.rstrip("/") + "/")]
        return max(inside, key=len, default=None)

    async def get(self, uri: str) -> dict:
        """The settings for the document (or file, or notebook) at `uri`."""
        answer = await self._answer(self.folder_of(uri), uri)
        return self.fallback if answer is None else answer[0]

    async def mode(self) -> str:
        """`diagnosticMode`: the window's setting (asked for without a scope)."""
        answer = await self._answer(_WINDOW, None)
        return self.fallback_mode if answer is None else answer[1]

    async def _answer(self, key: str | None, scope_uri: str | None) -> tuple[dict, str] | None:
        if self.ask is None:
            return None
        if key not in self._asked:
            self._asked[key] = asyncio.ensure_future(self._fetch(scope_uri))
        return await asyncio.shield(self._asked[key])  # one waiter cancelled does not cancel the others' fetch

    async def _fetch(self, scope_uri: str | None) -> tuple[dict, str] | None:
        try:
            answer = await self.ask(scope_uri)
        except Exception as exc:  # a client that fails the request: its initial settings hold
            self.log(f"gradguard: workspace/configuration failed for {scope_uri or 'the window'}: {exc}")
            return None
        if not isinstance(answer, dict):
            return None
        return parse({"gradguard": answer}), mode({"gradguard": answer}, self.log)

    def changed(self, settings) -> None:
        """`workspace/didChangeConfiguration`: ask again; settings it carries are the new fallback."""
        self._asked.clear()
        if isinstance(settings, dict):
            self.fallback = parse(settings)
            self.fallback_mode = mode(settings, self.log)
