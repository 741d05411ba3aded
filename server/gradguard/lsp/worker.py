"""A worker process's side of `workers`: it reads pickled jobs from its stdin and writes the
results to its stdout, and dies with the server.  It imports the analysis and nothing of the
server (no event loop, no threads pool): each worker's memory is the engine's and its caches'.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import threading
import time
from typing import BinaryIO

from gradguard import portable
from gradguard.api import Checked, check_source
from gradguard.config import Config
from gradguard.notebook import Cells
from gradguard.reparse import Reparser
from gradguard.workspace import Workspace


def send(stream: BinaryIO, data: bytes) -> None:
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def receive(stream: BinaryIO) -> bytes:
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
            fn, args = pickle.loads(receive(jobs))
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
        send(answers, data)


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
_reparser = Reparser()  # a worker's: the last tree of each document it analysed


def analyse(text: str, path: str, config: Config, cells: Cells, overlay: dict[str, str],
            facts: bool = True) -> tuple[Checked, bytes | None]:
    """`api.check_source` in a worker, following imports into the project's modules with the
    editor's texts of the open ones (`overlay`), and its facts as `portable` bytes (if
    `facts`: a file that is not open needs none for hovers).  An open document (`facts`) is
    parsed again only where it changed since this worker's last analysis of it (`reparse`)."""
    for gone in set(_workspace.overlay) - set(overlay):
        _workspace.set_text(gone, None)
    _reparser.keep_only({*overlay, path})  # the trees of documents closed since go
    for open_path, open_text in overlay.items():
        _workspace.set_text(open_path, open_text)
    checked = check_source(text, path, config, cells=cells, workspace=_workspace,
                           reparser=_reparser if facts else None)
    sent = portable.dumps(checked.facts) if facts and checked.facts is not None else None
    checked.facts = None
    return checked, sent
