"""`# noqa` comments: which findings they silence, the edit that adds a code to one, the
comments `--add-noqa` writes, and the ones that silence nothing (GG100)."""
import pytest
from gradguard.findings import Finding, Span
from gradguard.suppress import Noqa, add_noqa, noqa_edit


def finding(code: str, line: int) -> Finding:
    return Finding(code, "name", "error", "message", Span(line, 0, line, 5))


def codes_by_line(source: str) -> dict:
    return {d.line: d.codes and set(d.codes) for d in Noqa(source).directives}


def suppressed(noqa: Noqa, code: str, line: int) -> bool:
    return noqa.covering(finding(code, line)) is not None


def test_bare_and_coded_noqa():
    source = "a()  # noqa\nb()  # noqa: GG001, gg002\nc()  #noqa:GG003 GG004 because\nd()  # noqa: E501\n"
    assert codes_by_line(source) == {1: None, 2: {"GG001", "GG002"}, 3: {"GG003", "GG004"}, 4: {"E501"}}
    noqa = Noqa(source)
    assert suppressed(noqa, "GG101", 1)
    assert suppressed(noqa, "GG002", 2) and not suppressed(noqa, "GG003", 2)
    assert suppressed(noqa, "GG004", 3)
    assert not suppressed(noqa, "GG001", 4)  # another tool's code silences nothing of ours
    assert not suppressed(noqa, "GG001", 5)


def test_only_real_comments_count():
    source = 's = "# noqa"\nt = """\n# noqa\n"""\nu = 1  # see the noqa docs\nv = 2  # type: ignore # noqa: GG001\n'
    assert codes_by_line(source) == {6: {"GG001"}}


def test_untokenizable_text_keeps_earlier_comments():
    assert codes_by_line("a = 1  # noqa\nb = (\n") == {1: None}


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_lines_are_numbered_as_python_numbers_them(newline):
    """A form feed is no line break; a lone \\r is one (as for `ast` and LSP)."""
    source = newline.join(["import torch", "# one\ftwo", "x = 1  # noqa: GG001", ""])
    assert codes_by_line(source) == {3: {"GG001"}}


def test_only_the_first_line_of_a_finding_counts():
    noqa = Noqa("y.backward(\n    retain_graph=False)  # noqa\n")
    assert noqa.covering(Finding("GG001", "n", "error", "m", Span(1, 0, 2, 23))) is None


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


def test_a_file_noqa_is_a_comment_line_of_its_own():
    noqa = Noqa("import torch\n    # GradGuard: NOQA: gg002\nx = 1  # gradguard: noqa\n")
    [directive] = noqa.directives
    assert directive.file and directive.codes == ("GG002",)
    assert suppressed(noqa, "GG002", 40) and not suppressed(noqa, "GG001", 40)
    assert suppressed(Noqa("# gradguard: noqa\nx = 1\n"), "GG004", 2)


def test_a_line_ending_in_a_string_or_a_backslash_is_silenced_where_it_ends():
    source = 'y.backward(); s = """\ntext\n"""  # noqa: GG001\nz = 1 + \\\n    2  # noqa: GG004\n'
    noqa = Noqa(source)
    assert suppressed(noqa, "GG001", 1) and suppressed(noqa, "GG001", 2)
    assert suppressed(noqa, "GG004", 4) and not suppressed(noqa, "GG001", 4)


def test_add_noqa_groups_codes_per_line_and_skips_the_exempt_code():
    source = "a()  # type: ignore\nb = '''\nx\n'''\n"
    found = [finding("GG001", 1), finding("GG101", 1), finding("GG001", 1), finding("GG002", 2),
             finding("GG100", 2)]
    text, changed = add_noqa(source, found, exempt="GG100")
    assert changed == 2
    assert text == "a()  # type: ignore  # noqa: GG001, GG101\nb = '''\nx\n'''  # noqa: GG002\n"


@pytest.mark.parametrize("line, codes, expected", [
    ("y()  # noqa: GG001, E501\n", ("GG001",), "y()  # noqa: E501\n"),
    ("y()  # noqa: GG001, GG002\n", ("GG001",), "y()  # noqa: GG002\n"),
    ("y()  # noqa: GG001\n", ("GG001",), "y()\n"),
    ("y()  # noqa: GG001 keeps the graph\n", ("GG001",), "y()  # keeps the graph\n"),
    ("y()  # type: ignore  # noqa: GG001\n", ("GG001",), "y()  # type: ignore\n"),
    ("# gradguard: noqa: GG002\n", ("GG002",), ""),
    ("# gradguard: noqa\n", None, ""),
])
def test_the_edit_that_removes_unused_codes(line, codes, expected):
    from gradguard.edits import Replacement, apply

    source = "import torch\n" + line + "z = 1\n"
    noqa = Noqa(source)
    assert noqa.unused([finding("GG002", 2)] if "GG001, GG002" in line else []) == [(noqa.directives[0], codes)]
    span, text = noqa.without(noqa.directives[0], codes)
    assert apply(source, [Replacement(span, text)]) == "import torch\n" + expected + "z = 1\n"


def test_bare_noqa_other_tools_and_used_codes_are_never_unused():
    noqa = Noqa("a()  # noqa\nb()  # noqa: E501\nc()  # noqa: GG001, GG100\n")
    assert noqa.unused([finding("GG001", 3)], exempt="GG100") == []
