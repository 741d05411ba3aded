"""`# noqa` comments, read and written the way ruff and flake8 do.

`# noqa` alone silences every finding that starts on its line; `# noqa: GG001, GG002` only
those codes (commas and/or spaces between them).  A `# noqa: E501` for another tool silences
nothing of ours.  Only real comments count: the text is tokenized, so a `#` inside a string
is not a comment.
"""
from __future__ import annotations

import io
import re
import tokenize

from gradguard.findings import Finding

NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)

# line -> codes silenced on it; None means all codes (a noqa comment without codes)
NoqaMap = dict[int, "frozenset[str] | None"]


def noqa_map(source: str) -> NoqaMap:
    """The noqa comments of `source` by line.

    Text that stops tokenizing part-way (it parsed with `ast`, so that is rare) keeps the
    comments found before the failure.
    """
    if "noqa" not in source.lower():  # the common case costs no tokenizing
        return {}
    found: NoqaMap = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            match = NOQA.search(token.string) if token.type == tokenize.COMMENT else None
            if match:
                found[token.start[0]] = _codes(match)
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def is_suppressed(finding: Finding, noqa: NoqaMap) -> bool:
    """Whether a noqa comment on the finding's first line covers its code."""
    if finding.span.line not in noqa:
        return False
    codes = noqa[finding.span.line]
    return codes is None or finding.code in codes


def noqa_edit(line_text: str, code: str) -> str:
    """`line_text` changed so that its noqa comment also covers `code`.

    An existing `# noqa: ...` gets the code added (never a second comment); any other comment
    gets `  # noqa: CODE` appended; a line without comment gets it at the end.  The line is
    returned unchanged when it is already covered, or when no comment can go there (it ends
    inside a string or with a backslash continuation).
    """
    body = line_text.rstrip("\r\n")
    ending = line_text[len(body):]
    comment = _comment_column(body)
    if comment is None:
        return line_text
    if comment >= 0:
        match = NOQA.search(body, comment)
        if match:
            codes = _codes(match)
            if codes is None or code in codes:
                return line_text
            return body[:match.end()] + ", " + code + body[match.end():] + ending
    return body.rstrip() + "  # noqa: " + code + ending


def _codes(match: re.Match) -> frozenset[str] | None:
    """The codes a noqa comment silences; None for all."""
    codes = match.group("codes")
    return None if codes is None else frozenset(code.upper() for code in re.split(r"[\s,]+", codes))


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
