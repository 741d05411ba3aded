"""The `gradguard` command: check files, list the rules, show one rule's documentation.

Every error is one line on stderr with its cause.  Exit codes (the README has the table):
0 nothing found; 1 findings, or a file that could not be checked because of its content
(a syntax error, bytes that do not decode, a broken notebook, an analysis that ran out of
time) -- like ruff, which reports a file that does not parse as a finding; 2 a usage or
configuration error, a missing path, or an internal error in GradGuard.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gradguard import __version__
from gradguard.config import ConfigError, load_config, load_config_file

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
    check.add_argument("paths", nargs="+", metavar="PATH", help="files, or directories to walk for *.py and *.ipynb")
    check.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    check.add_argument("--select", type=_code_list, metavar="CODES",
                       help="comma-separated codes or prefixes to report, instead of the configured select and ignore")
    check.add_argument("--ignore", type=_code_list, metavar="CODES",
                       help="comma-separated codes or prefixes not to report, added to the configured ignore")
    check.add_argument("--config", type=Path, metavar="FILE",
                       help="the pyproject.toml to read (default: the nearest one with [tool.gradguard])")
    check.add_argument("--timeout", type=float, metavar="S", help="seconds of analysis allowed per file")
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
            raise UsageError("gradguard: error: a command is required: check, rules, rule or lsp (see --help)")
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
    missing = [path for path in args.paths if not os.path.lexists(path)]
    if missing:
        raise UsageError(f"gradguard check: error: no such file or directory: {missing[0]}")
    if args.config:
        config = load_config_file(args.config)
    else:  # one configuration for the run, found from the paths' common directory (as black does)
        config = load_config(Path(os.path.commonpath([os.path.abspath(path) for path in args.paths])))
    overrides: dict = {"timeout": args.timeout}
    if args.select is not None:
        overrides.update(select=args.select, ignore=[])
    if args.ignore is not None:
        overrides["ignore"] = [*overrides.get("ignore", config.ignore), *args.ignore]
    config = config.merged(overrides, "command line")
    if not config.enabled:
        print(f"gradguard: disabled by 'enabled = false' in {config.source}", file=sys.stderr)
        return 0

    found = []  # (result, finding) in output order
    files = failed = 0
    titles: dict = {}  # path -> the fixes applied (--fix) or shown (--diff)

    def fix(path):
        if not str(path).endswith(".ipynb"):
            titles[path] = _fix_file(path, config, args)

    internal = False
    for path, result in _checked(args, config, before=fix if args.fix or args.diff else None):
        files += 1
        if result.error:
            print(result.error, file=sys.stderr, flush=True)
            failed += 1
            internal = internal or result.internal
        if args.format == "text" and not args.diff:  # --diff prints the diffs alone, as ruff does
            for finding in result.findings:
                print(_text(result, finding))
        found.extend((result, finding) for finding in result.findings)
    fixed, changed = sum(map(len, titles.values())), sum(map(bool, titles.values()))
    if args.format == "json":
        print(json.dumps([_record(result, finding) for result, finding in found], indent=2))
    elif args.diff:
        print(f"Would fix {_plural(fixed, 'problem')} in {_plural(changed, 'file')}.", file=sys.stderr)
    else:
        fixes = f" Fixed {_plural(fixed, 'problem')}." if args.fix else ""
        print(_summary(files, failed, [finding.severity for _, finding in found]) + fixes)
    if args.diff:
        return 2 if internal else 1 if changed else 0
    return 2 if internal else 1 if found or failed else 0


def _checked(args, config, before=None) -> Iterator[tuple[Path, Checked]]:
    """(path, result) of every file to check, in walk order: from the cache when unchanged,
    analysed on `--jobs` processes otherwise.  `before(path)` (the fixes, which rewrite the
    file) runs just before a file is checked: then one file at a time, and no cache."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    from gradguard.api import iter_python_files
    from gradguard.cache import Cache, check_cached

    root = config.source.parent if config.source is not None else Path.cwd()
    cache = None if args.no_cache or before is not None else Cache(root, config)
    paths = list(iter_python_files(args.paths, config))
    check = partial(check_cached, config=config, cache=cache)
    jobs = min(args.jobs or os.cpu_count() or 1, len(paths))
    if jobs <= 1 or before is not None:
        for path in paths:
            if before is not None:
                before(path)
            yield path, check(path)
        return
    with ProcessPoolExecutor(jobs) as pool:
        yield from zip(paths, pool.map(check, paths, chunksize=max(1, min(16, len(paths) // (4 * jobs)))))


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}")
    return int(text)


def _fix_file(path, config, args) -> list[str]:
    """Apply (--fix) or print as a diff (--diff) the fixes of one .py file; their titles.
    A file is written back in its own encoding, and only when it was fully read."""
    import difflib
    import io
    import tokenize

    from gradguard.api import decode
    from gradguard.verify import fix_all

    try:
        data = Path(path).read_bytes()
        text = decode(data)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
        return []  # the check that follows says why
    new, titles = fix_all(text, str(path), config, unsafe=args.unsafe_fixes)
    if not titles:
        return []
    if args.diff:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                                   f"a/{path}", f"b/{path}"))
    else:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        Path(path).write_bytes(new.encode(encoding))
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


def _code_list(text: str) -> list[str]:
    return [code.strip() for code in text.split(",") if code.strip()]


def _text(result, finding) -> str:
    """`path:line:col: CODE [severity] message`, then one indented line per related location."""
    span = finding.span
    lines = [f"{result.where(span.line, span.column + 1)}: {finding.code} [{finding.severity}] {finding.message}"]
    lines += [f"    {result.where_span(rel.span)}: {rel.message}" for rel in finding.related]
    return "\n".join(lines)


def _record(result, finding) -> dict:
    """The JSON form of a finding: 1-based lines and columns, `cell` set in notebooks only."""
    from gradguard.api import display_path

    span = finding.span
    cell, line = result.locate(span.line)
    related = [{"path": display_path(rel.span.path), "cell": None, "line": rel.span.line,
                "column": rel.span.column + 1, "message": rel.message} if rel.span.path is not None else
               {"path": result.path, "cell": rel_cell, "line": rel_line, "column": rel.span.column + 1,
                "message": rel.message}
               for rel in finding.related for rel_cell, rel_line in [result.locate(rel.span.line)]]
    return {"path": result.path, "cell": cell, "line": line, "column": span.column + 1,
            "end_line": result.locate(span.end_line)[1], "end_column": span.end_column + 1,
            "code": finding.code, "name": finding.name, "severity": finding.severity,
            "message": finding.message, "related": related}


def _summary(files: int, failed: int, severities: list[str]) -> str:
    """`Found 3 problems (2 errors, 1 warning) in 10 files.` and files that could not be checked."""
    if severities:
        counts = {level: severities.count(level) for level in dict.fromkeys(severities)}
        detail = ", ".join(_plural(n, level) for level, n in counts.items())
        text = f"Found {_plural(len(severities), 'problem')} ({detail}) in {_plural(files, 'file')}."
    else:
        text = f"No problems found in {_plural(files, 'file')}."
    if failed:
        text += f" {_plural(failed, 'file')} could not be checked (see the messages above)."
    return text


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
