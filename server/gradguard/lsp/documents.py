"""Which text was analysed, and when: debounced, cancellable analyses per document.

Every change schedules an analysis of the document's text *at that version* after a short
quiet period; a newer change cancels the pending one, and a result whose version the editor
no longer has is dropped, so diagnostics never describe text the user cannot see.  The
analysis runs in a worker thread (it is pure Python and CPU-bound); the event loop stays free
to read the next change.
"""
from __future__ import annotations

import asyncio
import functools
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gradguard.api import Checked, check_source
from gradguard.config import Config, ConfigError, load_config


@dataclass
class Analysed:
    """The last analysis of a document that parsed: what the diagnostics and hovers show."""

    version: int | None
    text: str
    checked: Checked
    result_id: str = ""


@dataclass
class DocState:
    good: Analysed | None = None  # the last result without a syntax error
    pending: asyncio.Task | None = None
    waiters: list = field(default_factory=list)


class Analyses:
    def __init__(self, debounce: float = 0.03, log_error=print):
        self.debounce = debounce
        self.log_error = log_error
        self.docs: dict[str, DocState] = {}
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradguard-analysis")
        self.settings: dict = {}  # from initializationOptions / didChangeConfiguration
        self._configs: dict[Path, tuple[float, Config]] = {}
        self._counter = 0

    # ------------------------------------------------------------------ configuration
    def config_for(self, path: str | None) -> tuple[Config, str | None]:
        """pyproject.toml's [tool.gradguard] nearest the file, overridden by editor settings;
        a broken configuration falls back to the defaults and says why (second value)."""
        problem = None
        base = Config()
        if path:
            directory = Path(path).parent
            try:
                base = load_config(directory)
            except ConfigError as exc:
                problem = str(exc)
        try:
            return base.merged(self.settings, "editor settings") if self.settings else base, problem
        except ConfigError as exc:
            return base, str(exc)

    # ------------------------------------------------------------------ scheduling
    def schedule(self, uri: str, version: int | None, text: str, path: str | None, on_done, cells=()) -> None:
        """Analyse `text` (version `version`) after the debounce; `on_done(uri, version,
        checked, config_problem)` runs for this version unless a newer change superseded it.
        `cells` maps a joined notebook's lines to its cells."""
        state = self.docs.setdefault(uri, DocState())
        if state.pending is not None:
            state.pending.cancel()
        state.pending = asyncio.ensure_future(self._run(uri, version, text, path, on_done, cells))

    async def _run(self, uri, version, text, path, on_done, cells):
        try:
            await asyncio.sleep(self.debounce)
            config, problem = self.config_for(path)
            loop = asyncio.get_running_loop()
            checked = await loop.run_in_executor(
                self.pool, functools.partial(check_source, text, path or uri, config, cells=cells))
        except asyncio.CancelledError:
            return
        state = self.docs.get(uri)
        if state is None or state.pending is not asyncio.current_task():
            return  # closed or superseded meanwhile
        state.pending = None
        if not checked.error or checked.internal or "syntax error" not in checked.error:
            self._counter += 1
            state.good = Analysed(version, text, checked, f"{version}-{self._counter}")
        try:
            on_done(uri, version, checked, problem)
        except Exception:  # a bug in publishing must not kill the document's analyses
            self.log_error(f"gradguard: internal error while publishing {uri}:\n{traceback.format_exc()}")
        for waiter in state.waiters:
            if not waiter.done():
                waiter.set_result(None)
        state.waiters.clear()

    async def settled(self, uri: str) -> Analysed | None:
        """The result for the document's latest scheduled version (waits for a pending analysis)."""
        state = self.docs.get(uri)
        if state is None:
            return None
        if state.pending is not None and not state.pending.done():
            waiter = asyncio.get_running_loop().create_future()
            state.waiters.append(waiter)
            await waiter
        return state.good

    def close(self, uri: str) -> None:
        state = self.docs.pop(uri, None)
        if state is not None and state.pending is not None:
            state.pending.cancel()
