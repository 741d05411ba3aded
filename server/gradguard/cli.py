"""The `gradguard` command: check files, list the rules, show one rule's documentation.

Every error of the run is one line on stderr with its cause; a file that could not be
analysed is a finding of the pseudo-code GG000, like ruff's syntax errors, in every output
format.  Exit codes (the README has the table): 0 nothing found at or above `--fail-level`
(default: error, so a rule configured down to "warning" does not fail CI unless asked);
1 such findings, or a file not analysed because of its content (unreadable, too large, a
syntax error, bytes that do not decode, a broken notebook, an analysis that ran out of
time); 2 a usage or configuration error, a missing path, or an internal error in GradGuard.
`--exit-zero` turns 1 into 0, never 2.  Reports for machines (JSON, SARIF, ...) are written
by `gradguard.report`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from gradguard import __version__, report
from gradguard.config import SEVERITIES, Config, ConfigError, Configs, load_config_file

if TYPE_CHECKING:
    from gradguard.api import Checked


class UsageError(Exception):
    """A wrong command line; `str()` is the one line to print."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage plus the error; one line is enough
        raise UsageError(f"{self.prog}: error: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gradguard", description="Finds PyTorch autograd bugs before the code runs.")
    parser.add_argument("--version", action="version", version=f"gradguard {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = commands.add_parser("check", help="check Python files, notebooks and directories")
    check.add_argument("paths", nargs="*", metavar="PATH",
                       help="files, or directories to walk for *.py and *.ipynb (default: .); - reads stdin")
    check.add_argument("--output-format", choices=report.FORMATS, metavar="FORMAT",
                       help=f"report format: {', '.join(report.FORMATS)} (default: text)")
    check.add_argument("--format", choices=("text", "json"),
                       help="legacy: text, or json for a bare list of findings (see --output-format)")
    check.add_argument("--output-file", type=Path, metavar="FILE", help="write the report to FILE, not stdout")
    check.add_argument("--exit-zero", action="store_true",
                       help="exit 0 even with findings or files that could not be checked (not on an internal error)")
    check.add_argument("--fail-level", choices=SEVERITIES, default="error", metavar="LEVEL",
                       help=f"the lowest severity that fails the check: {', '.join(SEVERITIES)} (default: error)")
    check.add_argument("--statistics", action="store_true",
                       help="print the number of findings of each rule instead of the findings")
    check.add_argument("--stdin-filename", metavar="NAME",
                       help="with PATH -, the name the text is reported under and configured by")
    check.add_argument("--select", type=_code_list, metavar="CODES",
                       help="comma-separated codes or prefixes to report, instead of the configured select and ignore")
    check.add_argument("--ignore", type=_code_list, metavar="CODES",
                       help="comma-separated codes or prefixes not to report, added to the configured ignore")
    check.add_argument("--config", type=Path, metavar="FILE",
                       help="the pyproject.toml to read for every file (default: each file's nearest one "
                            "with [tool.gradguard])")
    check.add_argument("--timeout", type=float, metavar="S", help="seconds of analysis allowed per file")
    check.add_argument("--python", type=Path, metavar="PATH",
                       help="the interpreter whose packages installed in development mode (and PYTHONPATH) "
                            "imports may lead to (default: the one running gradguard)")
    check.add_argument("--no-respect-gitignore", action="store_true",
                       help="also walk into what .gitignore files and .git/info/exclude ignore")
    check.add_argument("--force-exclude", action="store_true",
                       help="apply exclude and git's ignores to paths named on the command line too (for pre-commit)")
    check.add_argument("--add-noqa", action="store_true",
                       help="add a `# noqa: CODE` comment to each line with a finding, and change nothing else")
    check.add_argument("--fix", action="store_true",
                       help="apply the preferred fix of each finding, when safe and confirmed by a new analysis")
    check.add_argument("--unsafe-fixes", action="store_true",
                       help="with --fix or --diff: also fixes that change which gradients flow or what memory is held")
    check.add_argument("--diff", action="store_true",
                       help="print the fixes --fix would make as a unified diff, and change nothing")
    check.add_argument("--no-cache", action="store_true",
                       help="analyse every file again, without reading or writing .gradguard_cache")
    check.add_argument("-j", "--jobs", type=_jobs, metavar="N",
                       help="files analysed at once (default: the number of cores)")
    check.set_defaults(run=run_check)

    rules = commands.add_parser("rules", help="list the rules")
    rules.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    rules.set_defaults(run=run_rules)

    rule = commands.add_parser("rule", help="show the documentation of one rule")
    rule.add_argument("code", metavar="CODE")
    rule.set_defaults(run=run_rule)

    explain = commands.add_parser("explain", help="explain a PyTorch autograd error from its traceback")
    explain.add_argument("file", nargs="?", default="-", metavar="FILE",
                         help="the file holding the traceback, or - for stdin (default)")
    explain.add_argument("--root", action="append", type=Path, default=[], metavar="DIR",
                         help="look for the traceback's files under DIR by the end of their path, for a "
                              "traceback from another machine (repeatable)")
    explain.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    explain.set_defaults(run=run_explain)

    lsp = commands.add_parser("lsp", help="run the language server on stdin/stdout")
    lsp.set_defaults(run=run_lsp)
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # never die on a message the terminal cannot encode
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            raise UsageError("gradguard: error: a command is required: check, rules, rule, explain or lsp (see --help)")
        return args.run(args)
    except UsageError as exc:
        print(exc, file=sys.stderr)
    except ConfigError as exc:
        print(f"gradguard: error: {exc}", file=sys.stderr)
    except SystemExit as exc:  # --help and --version
        return exc.code or 0
    except BrokenPipeError:  # `gradguard check . | head`: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 2


def run_lsp(args: argparse.Namespace) -> int:
    from gradguard.lsp.server import main as serve  # pygls and lsprotocol load only for the server

    return serve()


def run_check(args: argparse.Namespace) -> int:
    args.paths = args.paths or (["-"] if args.stdin_filename else ["."])  # ruff's defaults
    stdin = args.paths == ["-"]
    if not stdin and ("-" in args.paths or args.stdin_filename):
        raise UsageError("gradguard check: error: - (stdin, which --stdin-filename names) must be the only PATH")
    if stdin and (args.fix or args.diff or args.add_noqa):
        raise UsageError("gradguard check: error: --fix, --diff and --add-noqa rewrite files, not stdin")
    if args.add_noqa and (args.fix or args.diff):
        raise UsageError("gradguard check: error: --add-noqa cannot be combined with --fix or --diff")
    fmt = _output_format(args)
    if args.statistics and fmt not in ("text", "json", report.LEGACY_JSON):
        raise UsageError(f"gradguard check: error: --statistics prints text or json, not {fmt}")
    missing = [path for path in args.paths if not stdin and not os.path.lexists(path)]
    if missing:
        from gradguard.api import printable

        raise UsageError(f"gradguard check: error: no such file or directory: {printable(missing[0])}")
    # each file has its own project's settings, as in the editor (`--config`: one file for all)
    configs = Configs(load_config_file(args.config) if args.config else None, partial(_adjusted, args=args))
    common = Path(os.path.commonpath([os.path.abspath(path) for path in
                                      ([args.stdin_filename or "."] if stdin else args.paths)]))
    config = configs(common if common.is_dir() else common.parent)  # the run's, and bad options said at once
    if not config.enabled:
        print(f"gradguard: disabled by 'enabled = false' in {config.source}", file=sys.stderr)
        return 0
    if args.add_noqa:
        return _add_noqa(args, configs)
    data = sys.stdin.buffer.read() if stdin else None
    with _output(args.output_file) as out:
        return _report(args, configs, fmt, out, data)


def _adjusted(config: Config, args) -> Config:
    """A project's settings with the command line's on top: `--select` replaces its select and
    ignore, `--ignore` adds to its ignore."""
    overrides: dict = {"timeout": args.timeout, "force-exclude": args.force_exclude or None,
                       "respect-gitignore": False if args.no_respect_gitignore else None,
                       "python": str(args.python.resolve()) if args.python is not None else None}
    if args.select is not None:
        overrides.update(select=args.select, ignore=[])
    if args.ignore is not None:
        overrides["ignore"] = [*overrides.get("ignore", config.ignore), *args.ignore]
    return config.merged(overrides, "command line")


def _report(args, configs, fmt: str, out, data: bytes | None) -> int:
    """Check, write the report in `fmt` to `out`, and give the exit code.  `data`: the text
    read from stdin, when the one PATH is `-`.

    A file not analysed is a GG000 finding where the findings go, as ruff prints a syntax
    error (with `--diff`, whose stdout is a patch, its line goes to stderr); an internal
    error, which fails the run with 2, is said on stderr too.  The text output prints each
    file's findings as they come and keeps only counts."""
    from gradguard.api import failure

    found = report.Report(keep=fmt != "text" or args.statistics)
    titles: dict = {}  # path -> the fixes applied (--fix) or shown (--diff)

    def fix(path):
        if not str(path).endswith(".ipynb"):
            titles[path] = _fix_file(path, configs(path.parent), args)

    with_fixes = fmt in report.WITH_FIXES and not args.statistics
    for path, result, fixes in _checked(args, configs, before=fix if args.fix or args.diff else None, data=data,
                                        fixes=with_fixes):
        if result.internal or (result.error and args.diff):
            print(result.error, file=sys.stderr, flush=True)
        if fmt == "text" and not args.diff and not args.statistics:  # --diff prints the diffs alone, as ruff does
            for finding in filter(None, [failure(result), *result.findings]):
                print(_text(result, finding), file=out)
        found.add(result, fixes)
    fixed, changed = sum(map(len, titles.values())), sum(map(bool, titles.values()))
    summary = _summary(found.checked, found.failed, found.severities) + \
        (f" Fixed {_plural(fixed, 'problem')}." if args.fix else "")
    if args.statistics:
        out.write(report.statistics(found, as_json=fmt != "text"))
    elif fmt != "text":
        out.write(report.render(fmt, found))
    elif args.diff:
        print(f"Would fix {_plural(fixed, 'problem')} in {_plural(changed, 'file')}.", file=sys.stderr)
    else:
        print(summary, file=out)
    if args.output_file is not None and not args.diff:  # the report is in the file: say what it holds
        print(summary)
    if args.diff:
        return 2 if found.internal else 1 if changed else 0
    failing = any(SEVERITIES.index(level) <= SEVERITIES.index(args.fail_level) for level in found.severities)
    return 2 if found.internal else 0 if args.exit_zero else 1 if failing or found.failed else 0


def _output_format(args) -> str:
    """`--output-format`, or what the legacy `--format` names (json: the bare list of records)."""
    if args.format is not None and args.output_format is not None:
        raise UsageError("gradguard check: error: give --output-format or the legacy --format, not both")
    return report.LEGACY_JSON if args.format == "json" else args.output_format or "text"


@contextmanager
def _output(path: Path | None):
    """Where the report goes: stdout, or `--output-file` (its directory made if needed)."""
    if path is None:
        yield sys.stdout
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        stream = path.open("w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"gradguard check: error: cannot write {path}: {exc.strerror or exc}") from None
    with stream:
        yield stream


def _checked(args, configs, before=None, data: bytes | None = None,
             fixes: bool = False) -> Iterator[tuple[Path, Checked, list | None]]:
    """(path, result, fixes) of every file to check, in walk order, each under its own settings
    (`configs`): from the cache when unchanged, analysed on `--jobs` processes otherwise.
    `before(path)` (the fixes, which rewrite the file) runs just before a file is checked:
    then one file at a time, and no cache.  `data`: the text read from stdin, the one thing
    checked, named by `--stdin-filename` (nothing, when `--force-exclude` excludes that name).
    `fixes`: also the fix of each finding as text edits (`report.preferred_fixes`), else None.
    A terminal shows the count of files checked meanwhile (`_Progress`)."""
    from concurrent.futures import ProcessPoolExecutor

    from gradguard.api import check_file, iter_python_files
    from gradguard.cache import Cache

    if data is not None:
        name = args.stdin_filename or "-"
        config = configs(Path(name).parent)
        if name != "-" and not any(iter_python_files([name], configs, _note)):
            return
        result = check_file(name, config, data)
        yield Path(name), result, report.preferred_fixes(result, config, data) if fixes else None
        return
    paths = list(iter_python_files(args.paths, configs, _note))
    settings = [configs(path.parent) for path in paths]
    caches: dict = {}  # one per project: next to its pyproject.toml, keyed by its settings
    if not args.no_cache and before is None:
        for config in settings:
            caches.setdefault(config.source, Cache(config.base, config))
    check = partial(_check_one, fixes=fixes)
    jobs = 1 if before is not None else min(args.jobs or os.cpu_count() or 1, len(paths))
    progress = _Progress(len(paths))

    def one_by_one():
        for path, config in zip(paths, settings):
            if before is not None:
                progress.clear()  # --diff prints
                before(path)
            yield check(path, config, caches.get(config.source))

    try:
        with ProcessPoolExecutor(jobs) if jobs > 1 else nullcontext() as pool:
            results = pool.map(check, paths, settings, [caches.get(config.source) for config in settings],
                               chunksize=max(1, min(16, len(paths) // (4 * jobs)))) if jobs > 1 else one_by_one()
            for path, (result, found) in zip(paths, results):
                if result.error or (result.findings and sys.stdout.isatty()):
                    progress.clear()  # the caller prints them on the terminal
                yield path, result, found
                progress.step()
    finally:
        progress.clear()


def _note(text: str) -> None:
    """A line on stderr about the run (a file the walk skipped), not a finding."""
    print(f"gradguard: {text}", file=sys.stderr, flush=True)


class _Progress:
    """`checked 120/5386 files` on stderr, rewritten in place once a run has lasted `DELAY`
    seconds ($GRADGUARD_PROGRESS_DELAY, for a terminal recording or a test that must see it
    whatever the machine's speed), and only when stderr is a terminal: a log or a pipe never
    gets it."""

    DELAY, EVERY = 0.5, 0.1  # seconds before the first count, and at least between two

    def __init__(self, total: int):
        self.total, self.done, self.shown = total, 0, False
        self.live = total > 1 and sys.stderr.isatty()
        self.due = time.monotonic() + _seconds(os.environ.get("GRADGUARD_PROGRESS_DELAY"), self.DELAY)

    def step(self) -> None:
        self.done += 1
        if self.live and time.monotonic() >= self.due:
            sys.stderr.write(f"\rchecked {self.done}/{self.total} files")
            sys.stderr.flush()
            self.shown, self.due = True, time.monotonic() + self.EVERY

    def clear(self) -> None:
        """Erase the count (for a message to take the line); the next step writes it again."""
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown, self.due = False, time.monotonic()


def _seconds(text: str | None, default: float) -> float:
    """A number of seconds from the environment; the default if unset or not a number >= 0."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return default
    return value if value >= 0 else default


def _add_noqa(args, configs) -> int:
    """`--add-noqa`: a `# noqa: CODE` where it silences each finding, every file written back
    with its own encoding and line endings; notebooks are left as they are (stderr says so)."""
    from gradguard.encoding import decode, encode
    from gradguard.rules.unused_noqa import UnusedNoqa
    from gradguard.suppress import add_noqa

    added, internal = 0, False
    for path, result, _ in _checked(args, configs):
        internal = internal or result.internal
        if result.error:
            print(result.error, file=sys.stderr, flush=True)
        elif result.findings and path.suffix == ".ipynb":
            print(f"{path}: --add-noqa does not edit notebooks: {_plural(len(result.findings), 'finding')} left",
                  file=sys.stderr)
        elif result.findings:
            try:
                data = path.read_bytes()
                text, count = add_noqa(decode(data), result.findings, exempt=UnusedNoqa.code)
                if count:
                    path.write_bytes(encode(text, data))
            except (OSError, SyntaxError, UnicodeError, LookupError) as exc:
                print(f"{path}: cannot add noqa comments: {exc}", file=sys.stderr)
                continue
            added += count
    print(f"Added {_plural(added, 'noqa directive')}.", file=sys.stderr)
    return 2 if internal else 0


def _check_one(path: Path, config, cache, fixes: bool) -> tuple[Checked, list | None]:
    """One file's result, and its fixes as text edits if `fixes`: worked out in the worker
    process too, since confirming a fix costs an analysis."""
    from gradguard.cache import check_cached

    result = check_cached(path, config, cache)
    return result, report.preferred_fixes(result, config) if fixes else None


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}")
    return int(text)


def _fix_file(path, config, args) -> list[str]:
    """Apply (--fix) or print as a diff (--diff) the fixes of one .py file; their titles.
    A file is written back in its own encoding, and only when it was fully read."""
    import difflib

    from gradguard.api import NotReadable, read_source
    from gradguard.encoding import decode, encode
    from gradguard.spans import split_lines
    from gradguard.verify import fix_all

    try:
        data = read_source(path)
        text = decode(data)
    except (NotReadable, SyntaxError, UnicodeDecodeError, LookupError):
        return []  # the check that follows says why
    new, titles = fix_all(text, str(path), config, unsafe=args.unsafe_fixes)
    if not titles:
        return []
    if args.diff:
        sys.stdout.writelines(difflib.unified_diff(split_lines(text), split_lines(new),
                                                   f"a/{path}", f"b/{path}"))
    else:
        Path(path).write_bytes(encode(new, data))
    return titles


def run_rules(args: argparse.Namespace) -> int:
    from gradguard.rules import ALL_RULES

    if args.format == "json":
        print(json.dumps([{"code": rule.code, "name": rule.name, "predicts": rule.predicts,
                           "severity": rule.severity, "summary": rule.summary} for rule in ALL_RULES], indent=2))
    else:
        width = max((len(rule.name) for rule in ALL_RULES), default=0)
        for rule in ALL_RULES:
            print(f"{rule.code}  {rule.severity:<7}  {rule.name:<{width}}  {rule.summary}")
    return 0


def run_rule(args: argparse.Namespace) -> int:
    from gradguard.rules import rule_by_code

    rule = rule_by_code(args.code.strip().upper())
    if rule is None:
        raise UsageError(f"gradguard rule: error: unknown rule code {args.code!r} (see `gradguard rules`)")
    print(rule.doc(), end="")
    return 0


def run_explain(args: argparse.Namespace) -> int:
    """Exit 0 when a finding explains the error, 1 when none does (the raising line is still shown)."""
    from gradguard.explain import NoTraceback, explain

    if args.file == "-":
        if sys.stdin.isatty():
            print("Paste the traceback, then press Ctrl-D (Ctrl-Z and Enter on Windows):", file=sys.stderr)
        text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    else:
        try:
            text = Path(args.file).read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"gradguard explain: error: cannot read {args.file}: {exc.strerror or exc}") from None
    for root in args.root:
        if not root.is_dir():
            raise UsageError(f"gradguard explain: error: --root {root} is not a directory")
    try:
        explanation = explain(text, roots=args.root)
    except NoTraceback as exc:
        raise UsageError(f"gradguard explain: error: {exc}") from None
    if args.format == "json":
        print(json.dumps(explanation.to_dict(), indent=2))
    else:
        print(explanation.text(), end="")
    return 0 if explanation.finding is not None else 1


def _code_list(text: str) -> list[str]:
    return [code.strip() for code in text.split(",") if code.strip()]


def _text(result, finding) -> str:
    """`path:line:col: CODE [severity] message`, then one indented line per related location."""
    span = finding.span
    lines = [f"{result.where(span.line, span.column + 1)}: {finding.code} [{finding.severity}] {finding.message}"]
    lines += [f"    {result.where_span(rel.span)}: {rel.message}" for rel in finding.related]
    return "\n".join(lines)


def _summary(files: int, failed: int, severities: Counter) -> str:
    """`Found 3 problems (2 errors, 1 warning) in 10 files.` and files that could not be checked."""
    if severities:
        detail = ", ".join(_plural(n, level) for level, n in severities.items())
        text = f"Found {_plural(sum(severities.values()), 'problem')} ({detail}) in {_plural(files, 'file')}."
    else:
        text = f"No problems found in {_plural(files, 'file')}."
    if failed:
        text += f" {_plural(failed, 'file')} could not be checked (GG000)."
    return text


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
