"""The processes that analyse open documents and workspace files, several at a time.

An analysis is pure Python and CPU-bound: threads would take turns on one core (the GIL),
and with the one analysis thread the server had, a file that takes 20 seconds held back every
other document's diagnostics and hovers.  Worker processes run side by side, one per core: at
least two, so a small document is never queued behind a huge one, and at most four, as each
keeps its own parsed modules.  Each takes one job at a time, so the server knows which worker
runs what: a worker that dies (a C stack overflow, the kernel's out-of-memory killer) fails
only its own job, which is tried once more on a new worker; a job still running at `limit`
seconds (the engine stops itself when its time budget is spent; this is for when it does
not) has its worker killed and replaced.

What crosses the process boundary is what pickles cheaply: the text, its settings and the
editor's unsaved texts of the open files (imports read them) on the way in; the findings and
the facts behind them (`portable`: their syntax nodes as stable ids) on the way back, for
the server to answer hovers with.

A worker is a plain `python -c` subprocess (`serve`) that reads pickled jobs from its stdin
and writes the results to its stdout, both pipes of the server's own.  Not `multiprocessing`:
forking would copy the server's threads' locks in whatever state they were (the thread that
reads stdin holds its buffer's), and spawning starts a resource tracker that keeps the
editor's pipes open after the server has exited.  A worker's own prints go to stderr, and it
exits when the server is gone, even in the middle of an analysis: a killed editor leaves no
process behind.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from gradguard import portable
from gradguard.api import Checked, check_source
from gradguard.config import Config
from gradguard.notebook import Cells
from gradguard.workspace import Workspace

MAX_WORKERS = 4
# A worker's program: the server's `sys.path` (its arguments), then `serve`.
SERVE = "import sys; sys.path[:] = sys.argv[1:]; from gradguard.lsp.workers import serve; serve()"


def pool_size() -> int:
    """The cores this process may use, at least two and at most `MAX_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(2, min(cores, MAX_WORKERS))


class WorkerDied(RuntimeError):
    """The worker running a job exited before answering (twice, for `Workers.run`)."""


class Workers:
    def __init__(self, size: int | None = None):
        self.size = size or pool_size()
        self._idle: asyncio.Queue | None = None  # workers waiting for a job (made in the event loop)
        self._live: set[_Worker] = set()
        self._threads = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="gradguard-worker-io")
        self._stopped = False

    def start(self) -> None:
        """Start every worker now (each takes a moment to start Python and import the analysis),
        so the first documents opened are analysed at once, side by side."""
        while len(self._live) < self.size:
            self._queue().put_nowait(self._spawn())

    async def run(self, fn, *args, limit: float | None = None):
        """`fn(*args)` (a module-level function: it is pickled by name) in a worker: its result,
        or its exception; `TimeoutError` past `limit` seconds, `WorkerDied` if two workers died
        under it.  Cancelling the caller does not stop the job: its worker is free once it is done."""
        job = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        for retry in (False, True):
            worker = await self._take()
            exchange = asyncio.ensure_future(self._exchange(worker, job, limit))
            exchange.add_done_callback(_retrieve)
            try:
                ok, value = pickle.loads(await asyncio.shield(exchange))
            except WorkerDied:
                if retry:
                    raise
                continue
            if ok:
                return value
            raise value

    def stop(self) -> None:
        """Kill every worker, and start none again (the server exits: an analysis under way is
        not waited for)."""
        self._stopped = True
        for worker in list(self._live):
            self._drop(worker)
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _queue(self) -> asyncio.Queue:
        if self._idle is None:
            self._idle = asyncio.Queue()
        return self._idle

    def _spawn(self) -> _Worker:
        if self._stopped:
            raise RuntimeError("the server is shutting down")
        worker = _Worker()
        self._live.add(worker)
        return worker

    async def _take(self) -> _Worker:
        idle = self._queue()
        if idle.empty() and len(self._live) < self.size:
            return self._spawn()
        return await idle.get()

    async def _exchange(self, worker: _Worker, job: bytes, limit: float | None) -> bytes:
        """Send the job to the worker and return its answer, the worker back in the queue."""
        loop = asyncio.get_running_loop()
        try:
            answer = await asyncio.wait_for(loop.run_in_executor(self._threads, worker.exchange, job), limit)
        except asyncio.TimeoutError:
            self._drop(worker)  # the thread blocked on its pipe gets an end of file and returns
            raise TimeoutError(f"stopped after {limit:g} s") from None
        except (OSError, EOFError) as exc:
            self._drop(worker)
            raise WorkerDied(f"the analysis process ended (exit status {worker.proc.poll()}): {exc}") from None
        self._queue().put_nowait(worker)
        return answer

    def _drop(self, worker: _Worker) -> None:
        """Kill a busy worker (or all, when stopping) and put a new one in its place."""
        self._live.discard(worker)
        worker.kill()
        if not self._stopped:
            self._queue().put_nowait(self._spawn())


def _retrieve(task: asyncio.Future) -> None:
    """Mark an exchange's exception as seen: its caller may have been cancelled meanwhile."""
    if not task.cancelled():
        task.exception()


class _Worker:
    """One worker process: `exchange` (blocking, run in a thread) sends a job and reads its answer."""

    def __init__(self):
        flags = ["-S"] if sys.flags.no_site else []
        self.proc = subprocess.Popen([sys.executable, *flags, "-c", SERVE, *sys.path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def exchange(self, job: bytes) -> bytes:
        _send(self.proc.stdin, job)
        return _receive(self.proc.stdout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()  # reaped before the server exits: an editor may check that none outlives it
        for pipe in (self.proc.stdin, self.proc.stdout):
            pipe.close()


def _send(stream: BinaryIO, data: bytes) -> None:
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def _receive(stream: BinaryIO) -> bytes:
    """One message; EOFError when the other side is gone."""
    head = stream.read(8)
    data = stream.read(int.from_bytes(head, "big")) if len(head) == 8 else b""
    if len(head) < 8 or len(data) < int.from_bytes(head, "big"):
        raise EOFError("no answer")
    return data


def serve() -> None:
    """A worker's life: a job `(fn, args)` from stdin, `(True, result)` or `(False, exception)`
    to stdout, until stdin closes (the server is gone)."""
    jobs, answers = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the answers
    _die_with(os.getppid())
    while True:
        try:
            fn, args = pickle.loads(_receive(jobs))
        except EOFError:
            return
        try:
            answer = (True, fn(*args))
        except Exception as exc:  # the caller's to handle, as if it had run the function itself
            answer = (False, exc)
        try:
            data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an answer that does not pickle
            data = pickle.dumps((False, RuntimeError(f"the answer of {fn.__name__} cannot be sent: {exc}")))
        _send(answers, data)


def _die_with(server_pid: int) -> None:
    """End the worker when the server is gone, an analysis under way not waited for: on Linux
    the kernel kills it at once (`PR_SET_PDEATHSIG`), even in C code that holds the GIL, and
    everywhere a thread watches for a new parent."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_exit_with, args=(server_pid,), daemon=True).start()


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _exit_with(server_pid: int) -> None:
    """End the worker when the server is gone (it may have gone before the signal was asked for)."""
    while os.getppid() == server_pid:
        time.sleep(0.5)
    os._exit(1)


_workspace = Workspace()  # a worker's: the parsed modules its analyses read, and the editor's texts


def analyse(text: str, path: str, config: Config, cells: Cells, overlay: dict[str, str],
            facts: bool = True) -> tuple[Checked, bytes | None]:
    """`api.check_source` in a worker, following imports into the project's modules with the
    editor's texts of the open ones (`overlay`), and its facts as `portable` bytes (if
    `facts`: a file that is not open needs none for hovers)."""
    for gone in set(_workspace.overlay) - set(overlay):
        _workspace.set_text(gone, None)
    for open_path, open_text in overlay.items():
        _workspace.set_text(open_path, open_text)
    checked = check_source(text, path, config, cells=cells, workspace=_workspace)
    sent = portable.dumps(checked.facts) if facts and checked.facts is not None else None
    checked.facts = None
    return checked, sent
