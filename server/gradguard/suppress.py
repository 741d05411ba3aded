"""`# noqa` comments, read and written the way ruff and flake8 do.

`# noqa` alone silences every finding that starts on its line; `# noqa: GG001, GG002` only
those codes (commas and/or spaces between them).  A `# noqa: E501` for another tool silences
nothing of ours.  `# gradguard: noqa` (or `# gradguard: noqa: GG002, GG004`) as a comment line
of its own silences the whole file, as ruff's `# ruff: noqa` does.  Only real comments count:
the text is tokenized, so a `#` inside a string is not a comment.

A line that ends inside a multi-line string, or with a backslash, cannot hold a comment: a
finding starting there is silenced by a noqa comment on the line where the string (or the
continued line) ends, which is where `add_noqa` puts it, as ruff does.
"""
from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

from gradguard.findings import Finding, Span
from gradguard.spans import split_lines

_CODES = r"(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)"
NOQA = re.compile(rf"#\s*noqa\b(?::\s*{_CODES})?", re.IGNORECASE)
FILE_NOQA = re.compile(rf"#\s*gradguard\s*:\s*noqa\b(?::\s*{_CODES})?", re.IGNORECASE)
OURS = "GG"  # the prefix of GradGuard's codes: only these can be reported unused


@dataclass(frozen=True)
class Directive:
    """One noqa comment: where it is and what it silences."""

    line: int
    comment: int  # the column where the comment holding it starts
    column: int  # the column of its `#`
    end: int  # the column just past it (past its last code)
    codes_column: int | None  # the column of its first code; None for a blanket one
    codes: tuple[str, ...] | None  # upper case, as written; None: every code
    file: bool = False  # `# gradguard: noqa`: the whole file

    def covers(self, code: str) -> bool:
        return self.codes is None or code in self.codes


class Noqa:
    """The noqa comments of one source text, and which findings they silence."""

    def __init__(self, source: str):
        self.lines = split_lines(source)
        self.directives: list[Directive] = []
        self.moved: dict[int, int] = {}  # a line that cannot hold a comment -> the line that holds its noqa
        comments = {}
        if "noqa" in source.lower():  # the common case costs no tokenizing
            comments, self.moved = _scan(self.lines)
        for line, (column, text, alone) in comments.items():
            match = FILE_NOQA.match(text) if alone else None
            match = match or NOQA.search(text)
            if match is not None:
                codes = match.group("codes")
                self.directives.append(Directive(
                    line, column, column + match.start(), column + match.end(),
                    None if codes is None else column + match.start("codes"),
                    None if codes is None else _code_list(codes),
                    match.re is FILE_NOQA))
        self._by_line = {d.line: d for d in self.directives if not d.file}

    def covering(self, finding: Finding) -> Directive | None:
        """The directive that silences `finding`: one for the whole file, else the one on its
        first line (or where that line's noqa goes)."""
        for directive in self.directives:
            if directive.file and directive.covers(finding.code):
                return directive
        line = finding.span.line
        directive = self._by_line.get(self.moved.get(line, line))
        return directive if directive is not None and directive.covers(finding.code) else None

    def unused(self, findings: Iterable[Finding], exempt: str = "") -> list[tuple[Directive, tuple[str, ...] | None]]:
        """The directives that silence none of `findings`, with the GradGuard codes of each
        that silence nothing (None: a `# gradguard: noqa` for everything, unused).  Codes of
        other tools and blanket line comments are never reported (they may be another tool's);
        nor is `exempt` (the code of the rule reporting these, which may silence itself)."""
        used: set[tuple[int, str | None]] = set()
        for finding in findings:
            directive = self.covering(finding)
            if directive is not None:
                used.add((id(directive), finding.code if directive.codes is not None else None))
        out = []
        for directive in self.directives:
            if directive.codes is None:
                if directive.file and (id(directive), None) not in used:
                    out.append((directive, None))
                continue
            idle = tuple(code for code in dict.fromkeys(directive.codes) if code.startswith(OURS)
                         and code != exempt and (id(directive), code) not in used)
            if idle:
                out.append((directive, idle))
        return out

    def without(self, directive: Directive, codes: tuple[str, ...] | None) -> tuple[Span, str]:
        """The edit that takes `codes` out of `directive` (None: all of them): the code list
        rewritten when others stay, else the directive removed (with its comment when that is
        all the comment holds, with its line when that is all the line holds)."""
        line = directive.line
        text = self.lines[line - 1]
        body = text.rstrip("\r\n")
        kept = [code for code in directive.codes or () if codes is not None and code not in codes]
        if kept:
            return Span(line, directive.codes_column, line, directive.end), ", ".join(kept)
        before, after = body[:directive.column], body[directive.end:]
        if after.strip():  # words after it: `# noqa: GG001 keeps the graph` -> `# keeps the graph`
            prefix = "# " if directive.column == directive.comment else ""
            return Span(line, directive.column, line, len(body) - len(after.lstrip())), prefix
        if before.strip():
            return Span(line, len(before.rstrip()), line, len(body)), ""
        if line < len(self.lines):
            return Span(line, 0, line + 1, 0), ""
        return Span(line, 0, line, len(text)), ""


def add_noqa(source: str, findings: Iterable[Finding], exempt: str = "") -> tuple[str, int]:
    """`source` with a `# noqa: CODE` for each finding (but `exempt`'s) where it silences
    the finding (added to an existing noqa comment), and how many lines changed."""
    lines = split_lines(source)
    comments, moved = _scan(lines)
    wanted: dict[int, list[str]] = {}
    for finding in findings:
        line = moved.get(finding.span.line, finding.span.line)
        if finding.code != exempt and 0 < line <= len(lines) and finding.code not in wanted.get(line, []):
            wanted.setdefault(line, []).append(finding.code)
    changed = 0
    for line, codes in sorted(wanted.items()):
        new = old = lines[line - 1]
        comment = comments[line][0] if line in comments else -1
        for code in codes:
            new = noqa_edit(new, code, comment)
            comment = comment if comment >= 0 else len(new.rstrip("\r\n")) - len(f"# noqa: {code}")
        if new != old:
            lines[line - 1] = new
            changed += 1
    return "".join(lines), changed


def noqa_edit(line_text: str, code: str, comment: int | None = None) -> str:
    """`line_text` changed so that its noqa comment also covers `code`.

    An existing `# noqa: ...` gets the code added (never a second comment); any other comment
    gets `  # noqa: CODE` appended; a line without comment gets it at the end.  `comment`: the
    column of the line's comment (-1: none) when known from the whole text; else the line is
    tokenized alone, and returned unchanged when no comment can go there (it ends inside a
    string or with a backslash continuation).  A line already covered is returned unchanged.
    """
    body = line_text.rstrip("\r\n")
    ending = line_text[len(body):]
    comment = _comment_column(body) if comment is None else comment
    if comment is None:
        return line_text
    if comment >= 0:
        match = NOQA.search(body, comment)
        if match:
            codes = match.group("codes")
            if codes is None or code in _code_list(codes):
                return line_text
            return body[:match.end()] + ", " + code + body[match.end():] + ending
    return body.rstrip() + "  # noqa: " + code + ending


def _code_list(codes: str) -> tuple[str, ...]:
    return tuple(code.upper() for code in re.split(r"[\s,]+", codes))


def _scan(lines: list[str]) -> tuple[dict[int, tuple[int, str, bool]], dict[int, int]]:
    """The comments of a text by line, `(column, text, alone on its line)`, and where the noqa
    of each line that cannot hold a comment goes.  Text that stops tokenizing part-way (it
    parsed with `ast`, so that is rare) keeps what was found before the failure."""
    comments: dict[int, tuple[int, str, bool]] = {}
    moved: dict[int, int] = {}
    f_strings: list[int] = []  # where each open f-string starts (Python 3.12 tokenizes their parts)
    last = None  # the line the previous token ended on, None after a line break
    lines_iter = iter(lines)  # numbered as `ast` numbers them (\r alone ends a line too)
    try:
        for token in tokenize.generate_tokens(lambda: next(lines_iter, "")):
            (row, column), end = token.start, token.end[0]
            if token.type == tokenize.COMMENT:
                comments[row] = (column, token.string, not token.line[:column].strip())
            elif token.type == getattr(tokenize, "FSTRING_START", None):
                f_strings.append(row)
            elif token.type == getattr(tokenize, "FSTRING_END", None) and f_strings:
                moved.update(dict.fromkeys(range(f_strings.pop(), end), end))
            elif token.type == tokenize.STRING:
                moved.update(dict.fromkeys(range(row, end), end))
            if last is not None and row > last:  # a backslash ended line `last`
                moved.update(dict.fromkeys(range(last, row), row))
            last = None if token.type in (tokenize.NL, tokenize.NEWLINE) else end
    except (tokenize.TokenError, SyntaxError):
        pass
    for line in sorted(moved, reverse=True):  # a string may end on a continued line: follow to the end
        moved[line] = moved.get(moved[line], moved[line])
    return comments, moved


def _comment_column(line: str) -> int | None:
    """Where the comment on this one line starts, -1 if it has none, None if none may be added.

    The line is tokenized as if inside brackets, so that a line cut out of a longer statement
    (`    ).backward()`, `else:`) tokenizes on its own; a comment can then only be missing
    its end-of-line token when the line ends inside a string or with a backslash.
    """
    opened = min(line.count(")") + line.count("]") + line.count("}") + 1, 150)
    column, ended = -1, False
    try:
        for token in tokenize.generate_tokens(io.StringIO("(" * opened + line + "\n").readline):
            if token.type == tokenize.COMMENT:
                column = token.start[1] - opened
            ended = ended or token.type in (tokenize.NL, tokenize.NEWLINE)
    except (tokenize.TokenError, SyntaxError):
        pass  # the brackets opened above are never closed: this ends every tokenizing
    return column if ended else None
