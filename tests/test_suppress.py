"""`# noqa` comments: which findings they silence, and the edit that adds a code to one."""
import pytest
from gradguard.findings import Finding, Span
from gradguard.suppress import is_suppressed, noqa_edit, noqa_map


def finding(code: str, line: int) -> Finding:
    return Finding(code, "name", "error", "message", Span(line, 0, line, 5))


def test_bare_and_coded_noqa():
    noqa = noqa_map("a()  # noqa\nb()  # noqa: GG001, gg002\nc()  #noqa:GG003 GG004 because\nd()  # noqa: E501\n")
    assert noqa == {1: None, 2: {"GG001", "GG002"}, 3: {"GG003", "GG004"}, 4: {"E501"}}
    assert is_suppressed(finding("GG101", 1), noqa)
    assert is_suppressed(finding("GG002", 2), noqa) and not is_suppressed(finding("GG003", 2), noqa)
    assert is_suppressed(finding("GG004", 3), noqa)
    assert not is_suppressed(finding("GG001", 4), noqa)  # another tool's code silences nothing of ours
    assert not is_suppressed(finding("GG001", 5), noqa)


def test_only_real_comments_count():
    source = 's = "# noqa"\nt = """\n# noqa\n"""\nu = 1  # see the noqa docs\nv = 2  # type: ignore # noqa: GG001\n'
    assert noqa_map(source) == {6: {"GG001"}}


def test_untokenizable_text_keeps_earlier_comments():
    assert noqa_map("a = 1  # noqa\nb = (\n") == {1: None}


def test_only_the_first_line_of_a_finding_counts():
    noqa = noqa_map("y.backward(\n    retain_graph=False)  # noqa\n")
    assert not is_suppressed(Finding("GG001", "n", "error", "m", Span(1, 0, 2, 23)), noqa)


@pytest.mark.parametrize("line, expected", [
    ("y.backward()\n", "y.backward()  # noqa: GG001\n"),
    ("y.backward()   \r\n", "y.backward()  # noqa: GG001\r\n"),
    ("y.backward()", "y.backward()  # noqa: GG001"),
    ("y.backward()  # noqa: GG002\n", "y.backward()  # noqa: GG002, GG001\n"),
    ("y.backward()  # noqa:GG002 keeps the graph\n", "y.backward()  # noqa:GG002, GG001 keeps the graph\n"),
    ("y.backward()  # noqa: E501\n", "y.backward()  # noqa: E501, GG001\n"),
    ("y.backward()  # noqa: GG001\n", "y.backward()  # noqa: GG001\n"),
    ("y.backward()  # noqa\n", "y.backward()  # noqa\n"),
    ("y.backward()  # second pass\n", "y.backward()  # second pass  # noqa: GG001\n"),
    ('print("# noqa: GG002"); y.backward()\n', 'print("# noqa: GG002"); y.backward()  # noqa: GG001\n'),
    ("    ).backward()  # noqa: GG004\n", "    ).backward()  # noqa: GG004, GG001\n"),
    ("    else:\n", "    else:  # noqa: GG001\n"),
    ('f(x, "a\\"b",\n', 'f(x, "a\\"b",  # noqa: GG001\n'),
])
def test_noqa_edit(line, expected):
    assert noqa_edit(line, "GG001") == expected


@pytest.mark.parametrize("line", [
    'doc = """starts a string # here\n',  # the line ends inside a string
    "total = a + \\\n",  # a comment cannot follow a backslash continuation
])
def test_noqa_edit_leaves_lines_that_cannot_take_a_comment(line):
    assert noqa_edit(line, "GG001") == line
