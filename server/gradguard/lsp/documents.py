"""Which text was analysed, and when: one worker per document, coalescing changes.

A change records the document's text *at that version*; if no analysis of the document is
running, one starts after a very short pause (a burst of keystrokes arrives together and is
analysed once).  Changes that arrive while an analysis runs replace each other: when it
finishes, its result is dropped if a newer text is waiting, and that text is analysed next.
So the worker never falls behind, and diagnostics never describe text the editor no longer
has.  The analysis runs in a worker thread (it is pure Python and CPU-bound); the event
loop stays free to read the next change.
"""
from __future__ import annotations

import asyncio
import functools
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gradguard.api import Checked, check_source
from gradguard.config import Config, ConfigError, load_config
from gradguard.workspace import Workspace


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
    request: tuple | None = None  # the newest text not yet analysed: (version, text, path, on_done, cells)
    worker: asyncio.Task | None = None
    waiters: list = field(default_factory=list)
    path: str | None = None  # the file, if the document is one: other files may import it


async def _no_settings(uri: str) -> dict:
    return {}


class Analyses:
    def __init__(self, debounce: float = 0.005, log_error=print):
        self.debounce = debounce
        self.log_error = log_error
        self.docs: dict[str, DocState] = {}
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradguard-analysis")
        self.settings_of = _no_settings  # async: a document's URI -> its editor settings (`settings.FolderSettings.get`)
        self._counter = 0
        # where imports lead, with the open documents' texts: an unsaved change to models.py
        # is what train.py's analysis reads
        self.workspace = Workspace()

    # ------------------------------------------------------------------ configuration
    def config_for(self, path: str | None, settings: dict,
                   load: Callable[[Path], Config] = load_config) -> tuple[Config, str | None]:
        """pyproject.toml's [tool.gradguard] nearest the file, overridden by the editor's
        `settings`; a broken configuration falls back to the defaults and says why (second value).
        `load`: a directory's settings (a walk passes a `config.Configs`, which reads each file once)."""
        problem = None
        base = Config()
        if path:
            directory = Path(path).parent
            try:
                base = load(directory)
            except ConfigError as exc:
                problem = str(exc)
        try:
            return base.merged(settings, "editor settings") if settings else base, problem
        except ConfigError as exc:
            return base, str(exc)

    # ------------------------------------------------------------------ scheduling
    def schedule(self, uri: str, version: int | None, text: str, path: str | None, on_done, cells=()) -> None:
        """Analyse `text` (version `version`) soon; `on_done(uri, version, checked,
        config_problem)` runs for it unless a newer text superseded it.  `cells` maps a
        joined notebook's lines to its cells."""
        state = self.docs.setdefault(uri, DocState())
        state.request = (version, text, path, on_done, cells)
        if path and not cells:
            state.path = path
            self.workspace.set_text(path, text)
        if state.worker is None or state.worker.done():
            state.worker = asyncio.ensure_future(self._work(uri, state))

    async def _work(self, uri: str, state: DocState) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.debounce)
        while state.request is not None:
            version, text, path, on_done, cells = state.request
            state.request = None
            config, problem = self.config_for(path, await self.settings_of(uri))
            checked = await loop.run_in_executor(
                self.pool, functools.partial(check_source, text, path or uri, config, cells=cells,
                                             workspace=self.workspace))
            if self.docs.get(uri) is not state:
                return  # closed meanwhile
            if state.request is not None:
                continue  # superseded: the newer text is analysed next, this result is dropped
            if not checked.error or checked.internal or "syntax error" not in checked.error:
                self._counter += 1
                state.good = Analysed(version, text, checked, f"{version}-{self._counter}")
            try:
                on_done(uri, version, checked, problem)
            except Exception:  # a bug in publishing must not kill the document's analyses
                self.log_error(f"gradguard: internal error while publishing {uri}:\n{traceback.format_exc()}")
        _release(state)

    async def settled(self, uri: str) -> Analysed | None:
        """The result for the document's latest scheduled version (waits for a pending analysis)."""
        state = self.docs.get(uri)
        if state is None:
            return None
        if state.worker is not None and not state.worker.done():
            waiter = asyncio.get_running_loop().create_future()
            state.waiters.append(waiter)
            await waiter
        return state.good

    def importers(self, path: str) -> list[str]:
        """The open documents whose last analysis read the module at `path`."""
        key = str(Path(path).resolve())
        return [uri for uri, state in self.docs.items()
                if state.good is not None and key in state.good.checked.modules]

    def close(self, uri: str) -> None:
        state = self.docs.pop(uri, None)
        if state is not None and state.path:
            self.workspace.set_text(state.path, None)
        if state is not None and state.worker is not None:
            state.worker.cancel()
            _release(state)  # a request waiting for the analysis answers now, not never


def _release(state: DocState) -> None:
    """Wake whoever waits in `Analyses.settled` for the document's analysis."""
    for waiter in state.waiters:
        if not waiter.done():
            waiter.set_result(None)
    state.waiters.clear()
