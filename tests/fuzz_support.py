"""Fuzzing GradGuard: generated and mutated sources through `api.check_source`, random edit
sequences through the real language server.  bench/bench_fuzz.py runs it at full size,
tests/test_fuzz.py a seeded sample.

Sources.  The hand-written cases are what someone thought of; a linter also meets half-typed
code, pasted fragments, odd bytes and characters.  A sample is named by its kind, seed and
index (`samples`), which make it again (for Hypothesis's draws, with the same count drawn):
Python drawn from Python's grammar by hypothesmith, as drawn or put into training code (the
engine only runs on code that uses torch), training scripts from tests/progen.py, and the
corpus (../shared/corpus, tests/programs/cases) and small adversarial inputs mutated line-
and character-wise, or at the byte level (coding cookies, BOMs, other encodings).  The
property (`fault`): no exception leaves the check, a file not analysed says why in one line
that is not "internal error", and the check ends within its time budget + 10% + `SLACK`.

Edits.  An editor sends incremental changes in UTF-16 positions; the server applies them to
its copy of the text.  An `EditSequence` is random changes (inserts, deletes, replacements,
multi-line, CR/LF mixes, non-ASCII and astral characters) made to a local copy as they are
drawn; `replay` sends them, then pulls the diagnostics of the last version and those of the
local copy's text opened fresh under another URI: equal diagnostics show the server holds
the editor's text, and a hover must still be answered.
"""
from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import hypothesmith
from gradguard.api import Checked, check_file, check_source
from gradguard.config import Config
from hypothesis import HealthCheck, Phase, given, seed, settings
from lsp_support import utf16_offset
from lsprotocol import types
from lsprotocol.converters import get_converter

import adversarial
import progen
from corpus_support import CORPUS

TESTS = Path(__file__).resolve().parent
MARGIN, SLACK = 0.10, 0.5  # a check may exceed its budget by 10%, plus this many seconds (a loaded machine)
KINDS = ("grammar", "node", "progen", "corpus", "bytes", "adversarial")  # see `samples`

# What a mutation inserts: tokens that open or close constructs, and characters that lines,
# encodings and positions trip over.
TOKENS = ["(", ")", "[", "]", "{", "}", ":", ",", ".", "=", ":=", "*", "**", "@", "->", "...", "\\", "#",
          "'", '"', '"""', "'''", 'f"{', "}", "lambda", "yield", "await", "async", "return", "del", "global x",
          "nonlocal x", "if", "else", "for", "in", "with", "def", "class", "try:", "except", "finally:", "match",
          "case", "type", "import", "from", "pass", "not", "is", "None", "0x", "1e", "1_", "0o9", "!=", "<>",
          "loss.backward()", ".backward(", "torch.no_grad()", "x.add_(1)", "requires_grad=True", "\n", "    "]
ODD = ["\f", "\x00", "\ufeff", "\ud800", "\udfff", "\r\n", "\r", "\n", "\v", "\x1c", "\x85", "\u2028",
       "\u200b", "\u202e", "\t", "\U0001d518", "\U0001f600", "\u00e9", "\u0301", "\u4e2d", "\x7f", "\x1b[31m"]


@dataclass(frozen=True)
class Sample:
    name: str  # kind_seed_index: what makes it again
    text: str | bytes  # bytes: a file's content, read as `check_file` reads it


def fault(sample: Sample, timeout: float, path: str) -> str | None:
    """What is wrong with checking `sample` as the file `path` with a budget of `timeout`
    seconds, in one line; None when nothing is."""
    config = Config(timeout=timeout)
    # The processor time the check spent, not wall time: another process's load cannot stretch
    # it, and the deadline is read from the wall clock, so a loaded machine only stops it sooner.
    start = time.process_time()
    try:
        if isinstance(sample.text, bytes):
            result = check_file(path, config, data=sample.text)
        else:
            result = check_source(sample.text, path, config)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001  (what the property is about)
        return f"exception escaped: {type(exc).__name__}: {' '.join(str(exc).split())}"
    spent = time.process_time() - start
    return verdict(result, spent, timeout)


def verdict(result: Checked, spent: float, timeout: float) -> str | None:
    """`fault`'s judgement of a check that returned `result` after `spent` seconds of work."""
    if result.internal:
        return result.cause or result.error
    if result.error is not None and ("\n" in result.error or "\r" in result.error or not result.cause):
        return f"error not one line with its cause: {result.error!r}"
    if spent > timeout * (1 + MARGIN) + SLACK:
        return f"took {spent:.2f} s with a time budget of {timeout:g} s ({result.cause or 'analysed'})"
    return None


def signature(failure: str) -> str:
    """A failure's kind: its text with numbers and quoted parts blanked, to group alike ones."""
    return re.sub(r"\d+(\.\d+)?", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", failure))


# ------------------------------------------------------------------ sources

def corpus() -> list[str]:
    """The hand-written training code the mutations start from."""
    files = sorted(CORPUS.glob("cases/*.py")) + sorted((TESTS / "programs" / "cases").glob("*.py"))
    return [path.read_text(encoding="utf-8") for path in files]


def mutate(text: str, rng: random.Random, donors: list[str]) -> str:
    """`text` with one to four random mutations; `donors`: texts lines may be spliced from."""
    for _ in range(rng.randint(1, 4)):
        text = rng.choice(MUTATIONS)(text, rng, donors)
    return text


def _lines_op(text, rng, donors):
    lines = text.splitlines(keepends=True) or [""]
    a = rng.randrange(len(lines))
    b = min(len(lines), a + rng.randint(1, 8))
    op = rng.choice(("delete", "duplicate", "swap", "splice", "dedent", "indent", "tabs"))
    if op == "delete":
        del lines[a:b]
    elif op == "duplicate":
        lines[a:a] = lines[a:b]
    elif op == "swap":
        c = rng.randrange(len(lines))
        lines[a], lines[c] = lines[c], lines[a]
    elif op == "splice":
        donor = rng.choice(donors).splitlines(keepends=True) or [""]
        d = rng.randrange(len(donor))
        lines[a:a] = donor[d:d + rng.randint(1, 15)]
    else:
        prefix = {"indent": " " * rng.choice((1, 2, 4, 8)), "tabs": "\t", "dedent": ""}[op]
        lines[a:b] = [prefix + (line.lstrip(" \t") if op != "indent" else line) for line in lines[a:b]]
    return "".join(lines)


def _truncate(text, rng, donors):
    return text[:rng.randint(0, len(text))]


def _insert(text, rng, donors):
    at = rng.randint(0, len(text))
    return text[:at] + rng.choice(TOKENS + ODD) + text[at:]


def _odd(text, rng, donors):
    """Odd characters sprinkled, or the line breaks mixed."""
    if rng.random() < 0.3:
        breaks = ("\n", "\r\n", "\r")
        return "".join(line.rstrip("\r\n") + rng.choice(breaks) for line in text.splitlines(keepends=True))
    chars = list(text)
    for _ in range(rng.randint(1, 5)):
        chars.insert(rng.randint(0, len(chars)), rng.choice(ODD))
    return "".join(chars)


def _replace_char(text, rng, donors):
    if not text:
        return text
    at = rng.randrange(len(text))
    return text[:at] + rng.choice(TOKENS + ODD + [""]) + text[at + 1:]


MUTATIONS: list[Callable[[str, random.Random, list[str]], str]] = [_lines_op, _lines_op, _truncate, _insert,
                                                                    _insert, _odd, _replace_char]
COOKIES = ["utf-8", "latin-1", "utf-16", "utf-32", "ascii", "cp1252", "unicode_escape", "raw_unicode_escape",
           "utf-7", "rot13", "hex", "no-such-codec", "utf-8-sig", "shift_jis", "idna"]


def mutate_bytes(text: str, rng: random.Random) -> bytes:
    """A file's bytes as encodings go wrong: a coding cookie, a BOM, another encoding, bytes
    that are no UTF-8, a multi-byte character cut."""
    op = rng.choice(("cookie", "bom", "encoded", "bad bytes", "cut"))
    data = text.encode("utf-8", "surrogatepass")
    if op == "cookie":
        data = f"# -*- coding: {rng.choice(COOKIES)} -*-\n".encode() + data
    elif op == "bom":
        data = rng.choice((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00")) + data
    elif op == "encoded":
        data = text.encode(rng.choice(("utf-16", "utf-32", "latin-1", "cp1252", "utf-7")), "replace")
    elif op == "bad bytes":
        at = rng.randint(0, len(data))
        data = data[:at] + bytes(rng.randrange(128, 256) for _ in range(rng.randint(1, 4))) + data[at:]
    else:
        data = data[:rng.randint(0, len(data))] + "\u4e2d\U0001f600".encode()[:rng.randint(1, 6)]
    return data


def hypothesmith_texts(kind: str, seed_: int, n: int) -> list[str]:
    """n sources Hypothesis draws from Python's grammar ("grammar") or as libcst syntax trees
    ("node"), in the order drawn for `seed_` (no shrinking: every draw is new)."""
    strategy = hypothesmith.from_grammar() if kind == "grammar" else hypothesmith.from_node()
    drawn: list[str] = []

    @seed(seed_)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(text):
        drawn.append(text)

    if n:
        draw()
    return drawn


def splice(text: str, host: str, rng: random.Random) -> str:
    """`text` put into `host` before one of its lines that start a top-level statement."""
    lines = host.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line[:1].isalpha()] or [0]
    at = rng.choice(starts)
    return "".join(lines[:at]) + text + ("" if text.endswith(("\n", "\r")) else "\n") + "".join(lines[at:])


def samples(kind: str, seed_: int, n: int) -> list[Sample]:
    """n samples of `kind` (one of `KINDS`) for `seed_`; sample i of the non-Hypothesis kinds
    depends only on (kind, seed, i)."""
    donors = corpus()
    if kind in ("grammar", "node"):  # half as drawn, half put into training code (which the engine runs on)
        drawn = hypothesmith_texts(kind, seed_, n)
        return [Sample(f"{kind}_{seed_}_{i}", text if i % 2 == 0 else
                       splice(text, random.Random(f"{kind}:{seed_}:{i}").choice(donors), random.Random(i)))
                for i, text in enumerate(drawn)]
    if kind == "progen":
        programs = progen.generate(seed_, n)
    out = []
    for i in range(n):
        rng = random.Random(f"{kind}:{seed_}:{i}")
        if kind == "progen":  # half as generated (whole programs), half mutated
            text = programs[i].source if i % 2 == 0 else mutate(programs[i].source, rng, donors)
        elif kind == "corpus":
            text = mutate(rng.choice(donors), rng, donors)
        elif kind == "bytes":
            text = mutate_bytes(rng.choice(donors), rng)
        elif kind == "adversarial":
            make, size = rng.choice(list(adversarial.INPUTS.values()))
            text = mutate(make(max(1, int(size * rng.choice((0.01, 0.05, 0.2))))), rng, donors)
        else:
            raise ValueError(f"unknown kind of sample {kind!r}: one of {', '.join(KINDS)}")
        out.append(Sample(f"{kind}_{seed_}_{i}", text))
    return out


def save(sample: Sample, failure: str, directory: Path) -> Path:
    """A failing sample as JSON, to look at or check again: any text survives it, lone
    surrogates too (`json.loads(...)["text"]`), and bytes as base64."""
    data = sample.text
    record = {"name": sample.name, "failure": failure,
              **({"bytes": base64.b64encode(data).decode()} if isinstance(data, bytes) else {"text": data})}
    path = directory / f"{sample.name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ edits

# What an edit inserts: code, line breaks of each kind, and characters of one and two UTF-16
# units (é, 中; 𝔘 and 😀 are astral: surrogate pairs in the client's positions).
INSERTS = ["x", "loss", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "(", ")", "[]", ":", ",", ".", "=", "#", "'",
           '"""', "\\", "\u00e9", "\u4e2d", "\U0001d518", "\U0001f600", "\u200b", "\f", "\U0001f600\U0001d518x",
           "loss.backward()\n", "with torch.no_grad():\n    ", "x = torch.randn(3, requires_grad=True)\r\n",
           "y = x.exp()\ny.add_(1)\ny.sum().backward()\n", "# \u00e9\U0001f600 comment\r", "def f(x):\n    return x\n"]
_BREAK = re.compile(r"\r\n|\r|\n")  # LSP's line breaks (only these), as an editor splits lines


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset, text without its break) of each line; none after a final break."""
    out, pos = [], 0
    for m in _BREAK.finditer(text):
        out.append((pos, text[pos:m.start()]))
        pos = m.end()
    if pos < len(text):
        out.append((pos, text[pos:]))
    return out


def _units(text: str) -> list[int]:
    """The UTF-16 positions between characters of `text`: 0 ... its length in code units."""
    out = [0]
    for ch in text:
        out.append(out[-1] + (2 if ord(ch) > 0xFFFF else 1))
    return out


def _offset(text: str, pos: types.Position) -> int:
    """The index in `text` of an LSP position; past a line's end is its end, as LSP says."""
    lines = _lines(text)
    if pos.line >= len(lines):
        return len(text)
    start, line = lines[pos.line]
    return start + utf16_offset(line, pos.character)


def random_position(rng: random.Random, text: str) -> types.Position:
    """A position in `text`: between two characters (never inside a surrogate pair), now and
    then past the end of its line; the line after a final break too."""
    lines = _lines(text)
    last = len(lines) if not text or _BREAK.match(text[-1]) else len(lines) - 1
    line = rng.randint(0, last)
    if line == len(lines):
        return types.Position(line=line, character=0)
    units = _units(lines[line][1])
    past = rng.random() < 0.05
    return types.Position(line=line, character=units[-1] + rng.randint(1, 4) if past else rng.choice(units))


def random_change(rng: random.Random, text: str) -> types.TextDocumentContentChangeEvent:
    """One change to `text`: mostly an insert, delete or replacement of a range (possibly over
    several lines), sometimes the whole text sent anew."""
    if rng.random() < 0.03:
        return types.TextDocumentContentChangeWholeDocument(text=text + rng.choice(INSERTS))
    a, b = random_position(rng, text), random_position(rng, text)
    if (b.line, b.character) < (a.line, a.character):
        a, b = b, a
    op = rng.choice(("insert", "insert", "delete", "replace"))
    if op == "insert":
        b = a
    new = "" if op == "delete" else "".join(rng.choice(INSERTS) for _ in range(rng.randint(1, 3)))
    return types.TextDocumentContentChangePartial(range=types.Range(start=a, end=b), text=new)


def apply_change(text: str, change: types.TextDocumentContentChangeEvent) -> str:
    if isinstance(change, types.TextDocumentContentChangeWholeDocument):
        return change.text
    start, end = _offset(text, change.range.start), _offset(text, change.range.end)
    return text[:start] + change.text + text[max(start, end):]


@dataclass
class EditSequence:
    name: str
    start: str  # the text opened
    changes: list[list[types.TextDocumentContentChangeEvent]] = field(default_factory=list)  # one didChange each
    final: str = ""  # the local copy after every change

    def json(self) -> dict:
        converter = get_converter()
        return {"name": self.name, "start": self.start, "final": self.final,
                "changes": [[converter.unstructure(c) for c in batch] for batch in self.changes]}


def edit_sequence(seed_: int, index: int, starts: list[str], edits: tuple[int, int] = (1, 25)) -> EditSequence:
    """Edit sequence `index` of `seed_`: a text of `starts` (or none), then a random number of
    didChange notifications in the range `edits`, each of one to three changes."""
    rng = random.Random(f"edits:{seed_}:{index}")
    text = rng.choice(starts) if rng.random() < 0.9 else ""
    seq = EditSequence(f"edits_{seed_}_{index}", text)
    for _ in range(rng.randint(*edits)):
        batch = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            change = random_change(rng, text)
            text = apply_change(text, change)
            batch.append(change)
        seq.changes.append(batch)
    seq.final = text
    return seq


def pulling_capabilities() -> types.ClientCapabilities:
    """VS Code's capabilities (UTF-16 positions), pulling diagnostics: a pull answers for the
    text the server has now, so no wait for a push of the right version is needed."""
    from pytest_lsp import client_capabilities

    caps = client_capabilities("visual_studio_code")
    caps.text_document.diagnostic = types.DiagnosticClientCapabilities()
    return caps


def opened(client, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))


async def pulled(client, uri: str, timeout: float) -> list[dict]:
    """The document's diagnostics as JSON, without what depends on its URI and version."""
    report = await asyncio.wait_for(client.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=types.TextDocumentIdentifier(uri=uri))), timeout)
    out = []
    for diag in get_converter().unstructure(report.items):
        (diag.get("data") or {}).pop("version", None)
        for related in diag.get("relatedInformation") or []:
            if related["location"]["uri"] == uri:
                related["location"]["uri"] = "<document>"
        out.append(diag)
    return out


async def replay(client, seq: EditSequence, directory: str, timeout: float = 60,
                 local: Callable[[str], str] = lambda text: text) -> str | None:
    """Send `seq` to the server as an editor would, compare (see the module's doc), close the
    documents: what differs, in one line, or None.  `local`: the text the fresh document is
    opened with (the local copy; tests/test_fuzz.py alters it to see a difference found)."""
    uri, fresh = f"{directory}/{seq.name}.py", f"{directory}/{seq.name}_fresh.py"
    opened(client, uri, seq.start)
    try:
        for version, batch in enumerate(seq.changes, start=2):
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=batch))
        edited = await pulled(client, uri, timeout)
        opened(client, fresh, local(seq.final))
        expected = await pulled(client, fresh, timeout)
        if edited != expected:
            return f"diagnostics after the edits differ from a fresh open's: {_difference(edited, expected)}"
        internal = [d["message"] for d in edited if "internal error" in d["message"]]
        if internal:
            return f"internal error: {internal[0]}"
        rng = random.Random(seq.name)
        findings = [types.Position(**d["range"]["start"]) for d in edited if d["code"] != "GG000"]
        for position in [random_position(rng, seq.final), *findings]:
            hover = await asyncio.wait_for(client.text_document_hover_async(types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=position)), timeout)
            if hover is None and position in findings:
                return f"no hover at the finding at {position.line + 1}:{position.character}"
    except asyncio.TimeoutError:
        return f"no answer from the server within {timeout:g} s"
    finally:
        for closing in (uri, fresh):
            client.text_document_did_close(types.DidCloseTextDocumentParams(
                text_document=types.TextDocumentIdentifier(uri=closing)))
    return None


def _difference(edited: list[dict], expected: list[dict]) -> str:
    """The first diagnostic one list has and the other has not, in one line."""
    for name, ours, theirs in (("edited", edited, expected), ("fresh", expected, edited)):
        for diag in ours:
            if diag not in theirs:
                start = diag["range"]["start"]
                return (f"{name} only: {diag.get('code')} at {start['line'] + 1}:{start['character']} "
                        f"{' '.join(diag['message'].split())[:160]}")
    return f"same diagnostics in another order ({len(edited)})"
