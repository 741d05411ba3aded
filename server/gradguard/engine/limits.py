"""What stops an analysis: the work it may do (`Limits`) and its deadline.

The work is counted, never timed, so the same text gets the same findings on any machine,
under any load: every limit in `Limits` can only turn facts into unknowns, and so remove a
predicting finding, never make one (`work`, when set, stops the analysis: a fix whose
re-analysis spends it is not offered).  The deadline is the last resort for an input no count
foresaw: past it the file is reported as not analysed (GG000), not judged on half its facts.

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
from dataclasses import dataclass

STEPS = 64  # interpreter steps between two reads of the clock: a few milliseconds at most
ITEMS_PER_STEP = 256  # items of values a join goes through in about the time of one step
# items of a known sequence a `for` loop or a comprehension runs one by one whatever its body
ALWAYS_UNROLLED_ITEMS = 16
MAX_UNROLLED_ITEMS = 64  # items of a known sequence a loop or a comprehension may run one by one
MAX_UNROLLED_WORK = 256  # their count times the body's size, times the loops unrolled around it
VALUE_ITEMS = 16  # a value rewritten (a backward marking the state) costs about as many items


@dataclass(frozen=True)
class Limits:
    """How much work one analysis does before it trades precision for time, counted in the
    engine's units (statements, steps of work), so that it is the same on every machine."""

    statements: int = 20000  # statements interpreted per file: past it, calls are not followed
    statements_per_line: int = 20  # ... plus this many per line of the file
    foreign_statements: int = 3000  # statements of workspace modules: past it, their functions are opaque
    import_work: int = 30000  # steps of work with imports followed (~0.5 s here): past it, analysed alone
    modules: int = 24  # workspace modules one analysis reads
    import_depth: int = 3  # the analysed file's imports, theirs, and theirs
    call_depth: int = 10  # calls followed one inside another
    recursion: int = 3  # calls of a function by its own name followed inside calls of it, plus one
    call_string: int = 4  # calls a context remembers: regions of a function called from different places
    loop_rounds: int = 6  # iterations of a loop body on the way to its fixpoint
    concrete_iterations: int = 2  # loop iterations run on the exact state the previous one left
    work: int | None = None  # steps of work before the analysis gives up (AnalysisTimeout); None: no bound


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
    """The deadline (a `time.monotonic()` value, None for none) and the work allowed (steps,
    None for no bound) of one analysis; `where()` gives the line a timeout is reported at."""

    __slots__ = ("deadline", "work_limit", "left", "where", "spent", "items")

    def __init__(self, deadline: float | None, where: Callable[[], int | None] = lambda: None,
                 work_limit: int | None = None):
        self.deadline = deadline
        self.work_limit = work_limit
        self.left = STEPS
        self.where = where
        self.spent = 0  # steps of work counted before the last `read` (see `work`)
        self.items = 0  # items charged that do not yet make a step

    @property
    def work(self) -> int:
        """Steps of work done so far: a count, the same on any machine."""
        return self.spent + STEPS - self.left

    def tick(self, work: int = 1) -> None:
        self.left -= work
        if self.left <= 0:
            self.read()

    def charge(self, items: int) -> None:
        self.items += items
        if self.items >= ITEMS_PER_STEP:
            steps, self.items = divmod(self.items, ITEMS_PER_STEP)
            self.tick(steps)

    def read(self) -> None:
        self.spent += STEPS - self.left
        self.left = STEPS
        if self.work_limit is not None and self.spent > self.work_limit:
            raise AnalysisTimeout("work budget spent", line=self.where())
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
    """Count the `items` a join goes through against the running analysis's clock (if any):
    small joins add up, so that the work counted follows the time spent."""
    clock = _RUNNING.get()
    if clock is not None:
        clock.charge(items)


def few_unrolled(n: int, body: int, work: int) -> bool:
    """Whether `n` known items are run one by one, by a loop whose body has `body` statements or
    a comprehension of `body` expressions, inside loops unrolled `work` times: up to 16 always (a
    model's layers, a config's stages); up to 64 (a model's parameters frozen by name) while
    the statements run that way stay few."""
    return n <= ALWAYS_UNROLLED_ITEMS or n <= MAX_UNROLLED_ITEMS and n * body * work <= MAX_UNROLLED_WORK
