"""Memory of the language server as a user's machine sees it: the server process and the
worker processes it starts (lsp/workers.py), read from Linux's /proc; None elsewhere.  A
figure for the server process alone would leave out most of it."""
from __future__ import annotations

from pathlib import Path


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (children listed per thread, as /proc keeps them)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(child) for child in (task / "children").read_text().split())
            except (OSError, ValueError):
                continue
    return out


def _field(pid: int, name: str) -> int:
    """A `/proc/PID/status` field in bytes (0 for a process gone meanwhile)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith(name + ":")), 0)
    except (OSError, ValueError):
        return 0


def resident(pid: int) -> int | None:
    """Resident memory of the server and its workers now, in bytes."""
    if not Path(f"/proc/{pid}").exists():
        return None
    return sum(_field(p, "VmRSS") for p in _tree(pid))


def peak(pid: int) -> int | None:
    """The sum of each process's peak resident memory (`VmHWM`), in bytes: at most what they
    held at once, at least what the largest held."""
    if not Path(f"/proc/{pid}").exists():
        return None
    return sum(_field(p, "VmHWM") for p in _tree(pid))
