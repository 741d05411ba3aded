"""What stops an analysis: its deadline, read cheaply from wherever the engine spends time.

The interpreter counts its steps (statements and expressions) and the joins of values count
the items they go through; the clock is read only once per `STEPS` units of work, so a check
costs a subtraction almost always and an analysis stops within milliseconds of its deadline,
whatever the input.  The joins find the clock of the analysis running in their thread through
a context variable, so they need no reference to the interpreter, and analyses run side by
side in threads each keep their own.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar

STEPS = 64  # interpreter steps between two reads of the clock: a few milliseconds at most
ITEMS_PER_STEP = 256  # items of values a join goes through in about the time of one step


class AnalysisTimeout(Exception):
    """The analysis of one file ran past its deadline.  `line`: the line of the analysed file's
    statement being executed then (None when not known, e.g. before the first statement)."""

    def __init__(self, message: str = "time budget spent", line: int | None = None):
        super().__init__(message)
        self.line = line


class TooComplex(AnalysisTimeout):
    """The file is nested too deeply to parse or analyse within Python's recursion limit: the
    message says what is too deep, `line` where (None when the parser could not tell)."""


class Clock:
    """The deadline (a `time.monotonic()` value, None for none) of one analysis; `where()`
    gives the line a timeout is reported at."""

    __slots__ = ("deadline", "left", "where")

    def __init__(self, deadline: float | None, where: Callable[[], int | None] = lambda: None):
        self.deadline = deadline
        self.left = STEPS
        self.where = where

    def tick(self, work: int = 1) -> None:
        self.left -= work
        if self.left <= 0:
            self.read()

    def read(self) -> None:
        self.left = STEPS
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AnalysisTimeout(line=self.where())


_RUNNING: ContextVar[Clock | None] = ContextVar("gradguard_clock", default=None)


@contextmanager
def running(clock: Clock):
    """Make `clock` the one `charge` counts against, in this thread, for the block."""
    token = _RUNNING.set(clock)
    try:
        yield clock
    finally:
        _RUNNING.reset(token)


def charge(items: int) -> None:
    """Count the `items` a join goes through against the running analysis's clock (if any).
    Only a large join takes as long as an interpreter step: smaller ones are not counted."""
    if items >= ITEMS_PER_STEP:
        clock = _RUNNING.get()
        if clock is not None:
            clock.tick(items // ITEMS_PER_STEP)
