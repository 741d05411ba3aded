"""The processes that analyse open documents and workspace files, several at a time.

An analysis is pure Python and CPU-bound: threads would take turns on one core (the GIL),
and with the one analysis thread the server had, a file that takes 20 seconds held back every
other document's diagnostics and hovers.  Worker processes run side by side, up to one per
core: at least two, so a small document is never queued behind a huge one, and at most four,
as each keeps its own parsed modules; one starts with the server, the others when a job
finds every worker busy.  Each takes one job at a time, so the server knows which worker
runs what: a worker that dies (a C stack overflow, the kernel's out-of-memory killer) fails
only its own job, which is tried once more on a new worker; a job still running at `limit`
seconds (the engine stops itself when its time budget is spent; this is for when it does
not) has its worker killed and replaced.

What crosses the process boundary is what pickles cheaply: the text, its settings and the
editor's unsaved texts of the open files (imports read them) on the way in; the findings and
the facts behind them (`portable`: their syntax nodes as stable ids) on the way back, for
the server to answer hovers with.

A worker is a plain `python -c` subprocess (`worker.serve`) that reads pickled jobs from its stdin
and writes the results to its stdout, both pipes of the server's own.  Not `multiprocessing`:
forking would copy the server's threads' locks in whatever state they were (the thread that
reads stdin holds its buffer's), and spawning starts a resource tracker that keeps the
editor's pipes open after the server has exited.  A worker's own prints go to stderr, and it
exits when the server is gone, even in the middle of an analysis: a killed editor leaves no
process behind.
"""
from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from gradguard.lsp.worker import receive, send

MAX_WORKERS = 4
# A worker's program: the server's `sys.path` (its arguments), then `serve`.
SERVE = "import sys; sys.path[:] = sys.argv[1:]; from gradguard.lsp.worker import serve; serve()"


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
        self._idle: list[_Worker] = []  # workers waiting for a job, the one free last at the end
        self._freed: asyncio.Event | None = None  # set when a worker joins `_idle` (made in the event loop)
        self._live: set[_Worker] = set()
        self._homes: dict = {}  # a document -> the worker that analysed it last (see `run`)
        self._threads = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="gradguard-worker-io")
        self._stopped = False

    def start(self) -> None:
        """Start one worker now (it takes a moment to start Python and import the analysis), so
        the first document opened is analysed at once.  The others start when a job finds every
        worker busy, and stay: an editor that analyses one document at a time keeps one
        worker's memory (36 MB and the modules it parsed), not one per core."""
        if not self._live:
            self._release(self._spawn())

    async def run(self, fn, *args, limit: float | None = None, home=None):
        """`fn(*args)` (a module-level function: it is pickled by name) in a worker: its result,
        or its exception; `TimeoutError` past `limit` seconds, `WorkerDied` if two workers died
        under it.  Cancelling the caller does not stop the job: its worker is free once it is done.
        `home`: a document whose analyses should stay on one worker, which keeps what it learnt of
        the document (its last tree, see `reparse`; the modules it imports): its last worker if
        that one is free, else any that is."""
        job = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        for retry in (False, True):
            worker = await self._take(home)
            if home is not None:
                self._homes[home] = worker
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

    def forget(self, home) -> None:
        """The document is closed: no worker is its home any more."""
        self._homes.pop(home, None)

    def _release(self, worker: _Worker) -> None:
        self._idle.append(worker)
        if self._freed is not None:
            self._freed.set()

    def _spawn(self) -> _Worker:
        if self._stopped:
            raise RuntimeError("the server is shutting down")
        worker = _Worker()
        self._live.add(worker)
        return worker

    async def _take(self, home) -> _Worker:
        if not self._idle and len(self._live) < self.size:
            return self._spawn()
        while not self._idle:
            if self._freed is None:
                self._freed = asyncio.Event()
            self._freed.clear()
            await self._freed.wait()
        preferred = self._homes.get(home)
        # else the one free last: its caches are warm (the modules a project's files import alike),
        # and a pool that is never busy keeps one worker's memory, not every worker's
        worker = preferred if preferred in self._idle else self._idle[-1]
        self._idle.remove(worker)
        return worker

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
        self._release(worker)
        return answer

    def _drop(self, worker: _Worker) -> None:
        """Kill a busy worker (or all, when stopping) and put a new one in its place."""
        self._live.discard(worker)
        if worker in self._idle:  # stopping
            self._idle.remove(worker)
        for home in [h for h, w in self._homes.items() if w is worker]:
            del self._homes[home]
        worker.kill()
        if not self._stopped:
            self._release(self._spawn())


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
        send(self.proc.stdin, job)
        return receive(self.proc.stdout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()  # reaped before the server exits: an editor may check that none outlives it
        for pipe in (self.proc.stdin, self.proc.stdout):
            pipe.close()
