"""Which text was analysed, and when: one analysis at a time per document, coalescing changes.

A change records the document's text *at that version*; if no analysis of the document is
running, one starts after a very short pause (a burst of keystrokes arrives together and is
analysed once).  Changes that arrive while an analysis runs replace each other: when it
finishes, its result is dropped if a newer text is waiting, and that text is analysed next.
So a document's analyses never fall behind, and diagnostics never describe text the editor
no longer has.  Analyses run in worker processes (`workers`), those of different documents
side by side; the event loop stays free to read the next change.

Every analysis ends in a result the editor shows, whatever went wrong: a text that does not
parse, a time budget spent, a worker that died or a bug are a failed `Checked` (GG000, see
`server.GradGuardServer.diagnostics`), and a broken configuration is analysed with the
defaults and says why (`Analysed.problem`).  The task that analyses a document never dies
of it, so later edits are analysed and a waiting request is always answered.
"""
from __future__ import annotations

import asyncio
import functools
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gradguard import portable
from gradguard.api import Checked
from gradguard.config import Config, ConfigError, load_config
from gradguard.facts import Facts
from gradguard.lsp.worker import analyse
from gradguard.lsp.workers import Workers
from gradguard.workspace import Workspace

# The engine stops an analysis when its `timeout` is spent; one still running at twice that and
# five seconds more (a worker starting up, a loaded machine) did not, and its worker is killed.
OVERTIME = 2


@dataclass
class Analysed:
    """The last analysis of a document: what the diagnostics and hovers show."""

    version: int | None
    text: str
    checked: Checked  # `error` set: the text was not analysed (a GG000 diagnostic says why)
    sent: bytes | None = None  # the facts behind the findings (`portable`), for hovers
    problem: str | None = None  # why the configuration was ignored (the defaults were used)
    result_id: str = ""

    @functools.cached_property
    def facts(self) -> Facts | None:
        """The facts, read once, when a hover first needs them."""
        return portable.loads(self.sent) if self.sent is not None else None


@dataclass
class DocState:
    last: Analysed | None = None  # the result of the last analysis that was not superseded
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
        self.workers = Workers()
        self.local = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradguard-local")  # `run_local`
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

    async def check(self, text: str, path: str, config: Config, cells=(),
                    facts: bool = True, home: str | None = None) -> tuple[Checked, bytes | None]:
        """`text` analysed in a worker (`worker.analyse`), with the open documents' texts for its
        imports; whatever goes wrong is a failed `Checked`, never an exception.  `home`: the open
        document it is, analysed on the worker that analysed it last when that one is free."""
        try:
            return await self.workers.run(analyse, text, path, config, cells, dict(self.workspace.overlay), facts,
                                          limit=OVERTIME * config.timeout + 5, home=home)
        except TimeoutError:
            return Checked(path).failed(f"not analysed: time budget of {config.timeout:g}s spent (setting 'timeout'); "
                                        f"the analysis did not stop and was killed"), None
        except Exception as exc:  # a worker that died, a result that would not pickle, a bug
            return self._internal_error(path, exc), None

    def _internal_error(self, path: str, exc: Exception) -> Checked:
        self.log_error(f"gradguard: internal error analysing {path}:\n{traceback.format_exc()}")
        return Checked(path).crashed(exc)

    async def _work(self, uri: str, state: DocState) -> None:
        try:
            await asyncio.sleep(self.debounce)
            while state.request is not None:
                version, text, path, on_done, cells = state.request
                state.request = None
                try:
                    config, problem = self.config_for(path, await self.settings_of(uri))
                    checked, sent = await self.check(text, path or uri, config, cells, home=uri)
                except Exception as exc:  # a bug here must not stop the document's analyses
                    checked, sent, problem = self._internal_error(path or uri, exc), None, None
                if self.docs.get(uri) is not state:
                    return  # closed meanwhile
                if state.request is not None:
                    continue  # superseded: the newer text is analysed next, this result is dropped
                self._counter += 1
                state.last = Analysed(version, text, checked, sent, problem, f"{version}-{self._counter}")
                try:
                    on_done(uri, version, checked, problem)
                except Exception:  # a bug in publishing must not stop the document's analyses
                    self.log_error(f"gradguard: internal error while publishing {uri}:\n{traceback.format_exc()}")
        finally:
            _release(state)  # whoever waits for the analysis is answered, however it ended

    def busy(self, uri: str) -> bool:
        """Whether an analysis of the document is under way or due."""
        state = self.docs.get(uri)
        return state is not None and state.worker is not None and not state.worker.done()

    async def settled(self, uri: str) -> Analysed | None:
        """The result for the document's latest scheduled version (waits for a pending analysis)."""
        state = self.docs.get(uri)
        if state is None:
            return None
        if self.busy(uri):
            waiter = asyncio.get_running_loop().create_future()
            state.waiters.append(waiter)
            await waiter
        return state.last

    def importers(self, path: str) -> list[str]:
        """The open documents whose last analysis read the module at `path`."""
        key = str(Path(path).resolve())
        return [uri for uri, state in self.docs.items()
                if state.last is not None and key in state.last.checked.modules]

    async def run_local(self, fn, *args):
        """`fn(*args)` in the server's own thread for the analyses it makes itself (code actions
        confirm fixes, explain reads a traceback's files), one at a time: the event loop stays
        free to read messages and publish the workers' results meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.local, functools.partial(fn, *args))

    def stop(self) -> None:
        """The server shuts down: every analysis is stopped, and none starts again."""
        for uri in list(self.docs):
            self.close(uri)
        self.workers.stop()
        self.local.shutdown(wait=False, cancel_futures=True)

    def close(self, uri: str) -> None:
        state = self.docs.pop(uri, None)
        self.workers.forget(uri)
        if state is not None and state.path:
            self.workspace.set_text(state.path, None)
        if state is not None and state.worker is not None:
            state.worker.cancel()
            _release(state)  # a request waiting for the analysis answers now, not when the task ends


def _release(state: DocState) -> None:
    """Wake whoever waits in `Analyses.settled` for the document's analysis."""
    for waiter in state.waiters:
        if not waiter.done():
            waiter.set_result(None)
    state.waiters.clear()
